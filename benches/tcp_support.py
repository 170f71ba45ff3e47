"""What the TCP bench scripts share (`tcp_cancel.py`, `tcp_shutdown.py`,
`tcp_merge.py`): the handshake line they open a session with, and a free
loopback port for the `subagentd` they start. Python finds this module
beside the script that imports it.
"""
import socket

HANDSHAKE = ('{"type":"handshake/req","id":"h","a2e":"1.0","agent_id":"bench",'
             '"agent_caps":["multi_agent"],"auth_token":""}\n')


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

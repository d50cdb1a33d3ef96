#!/usr/bin/env bash
# Rewrites the README's config reference from `shardrec validate --reference`.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BUILD_DIR:-build}/shardrec
python3 - "$bin" <<'PY'
import subprocess, sys
ref = subprocess.run([sys.argv[1], "validate", "--reference"], check=True,
                     capture_output=True, text=True).stdout
s = open("README.md").read()
a, b = "<!-- config-reference:begin -->\n", "<!-- config-reference:end -->"
s = s[: s.index(a) + len(a)] + ref + s[s.index(b):]
open("README.md", "w").write(s)
PY

#!/usr/bin/env bash
# scripts/gen_criteo_like.py writes Criteo TSV that criteo-preprocess reads whole (40 fields a
# line, 8 hex digits or empty per categorical), the same files for the same seed, other files for
# another.   test/data/test_gen_criteo_like.sh SHARDREC_BIN GEN_SCRIPT
set -euo pipefail
bin=$1 gen=$2
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
for profile in kaggle planted; do
    python3 "$gen" "$w/a" --lines 100 --days 2 --seed 3 --profile $profile > /dev/null
    python3 "$gen" "$w/b" --lines 100 --days 2 --seed 3 --profile $profile > /dev/null
    python3 "$gen" "$w/c" --lines 100 --days 2 --seed 4 --profile $profile > /dev/null
    diff -r "$w/a" "$w/b" || { echo "$profile: seed 3 twice gave different files"; exit 1; }
    ! diff -rq "$w/a" "$w/c" > /dev/null || { echo "$profile: seeds 3 and 4 gave the same files"; exit 1; }
    awk -F'\t' 'NF != 40 || $1 !~ /^[01]$/ { print FILENAME ":" FNR ": " NF " fields"; exit 1 }
        { for (i = 15; i <= 40; ++i)
              if ($i != "" && ($i !~ /^[0-9a-f]+$/ || length($i) != 8)) {
                  print FILENAME ":" FNR ": field " i " is \"" $i "\""; exit 1 } }' "$w"/a/day_*
    "$bin" data criteo-preprocess --in "$w/a/day_0" "$w/a/day_1" --out "$w/data" \
        --table-sizes 1460,583,4000000,2202608,305,24,12517,633,3,93145,5683,4000000,3194,27,14992,4000000,10,5652,2173,4,4000000,18,15,286181,105,142572 \
        > "$w/pre.log" 2>&1
    grep -q "100 rows in .*(0 bad lines skipped)" "$w/pre.log" || { cat "$w/pre.log"; exit 1; }
    rm -rf "$w/a" "$w/b" "$w/c" "$w/data"
done
echo ok

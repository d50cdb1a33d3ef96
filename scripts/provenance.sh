# Sourced by the benchmark scripts (bench.sh, sweep.sh, gpu_check.sh), run in the repository.
# provenance: the tree's `git describe --always --dirty` ("unknown" outside git).
# save_provenance DIR: writes DIR/provenance.txt (UTC date, that commit) and, when the tree has
# uncommitted changes, DIR/uncommitted.diff (git diff HEAD: tracked files), so every result folder
# names exactly the code that made it. The binaries' own rows carry their build's commit too.
provenance() {
    git describe --always --dirty --abbrev=7 2>/dev/null || echo unknown
}

save_provenance() {
    local out=$1
    {
        echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "commit: $(provenance)"
    } > "$out/provenance.txt"
    if ! git diff --quiet HEAD 2>/dev/null; then
        git diff HEAD > "$out/uncommitted.diff"
        echo "uncommitted changes: uncommitted.diff" >> "$out/provenance.txt"
    fi
}

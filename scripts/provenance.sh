# Sourced by the benchmark scripts (bench.sh, sweep.sh, gpu_check.sh, ...), run in the repository.
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

# prepare_bench OUT BUILD_DIR: the result folder OUT with its provenance, shardrec built (Release)
# in BUILD_DIR, and mpi_flags: mpirun's flags for more ranks than cores, and as root.
prepare_bench() {
    mkdir -p "$1"
    save_provenance "$1"
    cmake -S . -B "$2" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$2" -j "$(nproc 2>/dev/null || echo 2)" --target shardrec
    mpi_flags=(--oversubscribe)
    [ "$(id -u)" -ne 0 ] || mpi_flags+=(--allow-run-as-root)
}

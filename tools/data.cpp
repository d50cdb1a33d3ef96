// `shardrec data criteo-preprocess --in FILES... --out DIR [...]`: Criteo TSV click logs to the
// binary shards and manifest that data.type: criteo_binary reads (engine/data/criteo_preprocess.h).
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "comm/mpi_env.h"
#include "engine/core/error.h"
#include "engine/data/criteo_preprocess.h"
#include "tools/cli.h"

namespace shardrec::cli {

const char* const kDataUsage =
    "usage: shardrec data criteo-preprocess --in FILE... --out DIR [--max-ind-range N]\n"
    "           [--table-sizes LIST|mlperf] [--multi-hot LIST|mlperf] [--threads N]\n"
    "           [--multi-hot-seed N] [--lines-per-shard N] [--chunk-lines N]\n"
    "           [--raw-ids [LIST]] [--skip-bad-lines] [--no-progress]\n"
    "\n"
    "Converts Criteo click logs in TSV (Kaggle train.txt, or the Terabyte day_0 .. day_23,\n"
    "decompressed) into fixed-size binary records in shards plus DIR/manifest.json, for\n"
    "data.type: criteo_binary. Memory stays bounded whatever the input size; lines are parsed on\n"
    "--threads threads and written in input order (the output does not depend on N). Rerun the\n"
    "same command after an interruption: complete shards are kept and each input continues\n"
    "after its last complete shard. Dense features become log(max(x, 0) + 1); a categorical hex\n"
    "value v becomes the id v mod (its table's rows), or v itself with --raw-ids; empty\n"
    "fields are 0.\n"
    "\n"
    "  --in FILE...         TSV files in day order; the last is the eval split by default\n"
    "  --out DIR            the output directory\n"
    "  --max-ind-range N    rows of every table (default 40000000); caps --table-sizes\n"
    "  --table-sizes L      26 comma-separated table rows, or mlperf (DLRM-DCNv2's)\n"
    "  --multi-hot L        ids per sample of each feature: 26 comma-separated sizes, or mlperf\n"
    "                       (DLRM-DCNv2's sizes and table rows); extra ids are materialised\n"
    "                       from the one-hot id as MLPerf's materialize_synthetic_multihot does\n"
    "  --multi-hot-seed N   keys the materialised ids (default 0)\n"
    "  --raw-ids [LIST]     keep each categorical value whole (its 64 bits, as an i64 id;\n"
    "                       records carry 8 bytes for it) instead of v mod rows, for tables\n"
    "                       with model.tables[].managed_collision: every feature, or the\n"
    "                       comma-separated ones (cat_3,cat_9); one-hot only\n"
    "  --threads N          parser threads (default: the cores)\n"
    "  --lines-per-shard N  input lines per shard (default 1048576)\n"
    "  --chunk-lines N      lines per parse task (default 16384; memory ~ threads x chunk)\n"
    "  --skip-bad-lines     skip and count malformed lines (default: stop at the first, with\n"
    "                       FILE:LINE and the field)\n"
    "  --no-progress        no progress bar\n";

namespace {

std::vector<int64_t> parse_list(const std::string& flag, const std::string& text) {
    std::vector<int64_t> out;
    size_t start = 0;
    while (start <= text.size()) {
        const size_t comma = std::min(text.find(',', start), text.size());
        out.push_back(parse_positive(flag, text.substr(start, comma - start), kDataUsage));
        start = comma + 1;
    }
    if (out.size() != data::kCriteoNumSparse) {
        throw UsageError(fmt::format("{} needs {} comma-separated values (one per cat_ feature), "
                                     "got {}",
                                     flag, data::kCriteoNumSparse, out.size()),
                         kDataUsage);
    }
    return out;
}

// The columns of --raw-ids LIST (cat_<t> names), or every column for "".
std::vector<int> raw_id_columns(const std::string& text) {
    std::vector<int> out;
    if (text.empty()) {
        for (int t = 0; t < data::kCriteoNumSparse; ++t) {
            out.push_back(t);
        }
        return out;
    }
    const auto names = data::criteo_sparse_feature_names();
    size_t start = 0;
    while (start <= text.size()) {
        const size_t comma = std::min(text.find(',', start), text.size());
        const std::string name = text.substr(start, comma - start);
        const auto it = std::find(names.begin(), names.end(), name);
        if (it == names.end()) {
            throw UsageError(fmt::format("--raw-ids: '{}' is not a categorical feature (cat_0 .. "
                                         "cat_25, comma-separated)",
                                         name),
                             kDataUsage);
        }
        out.push_back(static_cast<int>(it - names.begin()));
        start = comma + 1;
    }
    return out;
}

struct PreprocessArgs {
    data::CriteoPreprocessOptions options;
    int64_t max_ind_range = 0;  // 0: not given
    std::string table_sizes;
    std::string multi_hot;
    bool raw_ids = false;
    std::string raw_id_features;  // "": every feature
};

// Returns false when --help was asked for.
bool parse_preprocess_args(const std::vector<std::string>& args, PreprocessArgs& a) {
    data::CriteoPreprocessOptions& o = a.options;
    o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    o.show_progress = true;
    bool in_list = false;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (arg == "--help" || arg == "-h") {
            return false;
        }
        if (in_list && (arg.empty() || arg[0] != '-')) {
            o.inputs.push_back(arg);
            continue;
        }
        in_list = false;
        if (arg == "--skip-bad-lines") {
            o.skip_bad_lines = true;
            continue;
        }
        if (arg == "--no-progress") {
            o.show_progress = false;
            continue;
        }
        if (arg == "--in") {
            in_list = true;
            continue;
        }
        if (arg == "--raw-ids") {  // an optional list: no option value starts with '-'
            a.raw_ids = true;
            if (i + 1 < args.size() && !args[i + 1].empty() && args[i + 1][0] != '-') {
                a.raw_id_features = args[++i];
            }
            continue;
        }
        if (arg.empty() || arg[0] != '-') {
            throw UsageError(fmt::format("unexpected argument '{}'", arg), kDataUsage);
        }
        if (i + 1 >= args.size()) {
            throw UsageError(fmt::format("{} needs a value", arg), kDataUsage);
        }
        const std::string& value = args[++i];
        if (arg == "--out") {
            o.out_dir = value;
        } else if (arg == "--max-ind-range") {
            a.max_ind_range = parse_positive(arg, value, kDataUsage);
        } else if (arg == "--table-sizes") {
            a.table_sizes = value;
        } else if (arg == "--multi-hot") {
            a.multi_hot = value;
        } else if (arg == "--multi-hot-seed") {
            o.layout.multi_hot_seed = static_cast<uint64_t>(parse_positive(arg, value, kDataUsage));
        } else if (arg == "--threads") {
            o.threads =
                static_cast<int>(std::min<int64_t>(parse_positive(arg, value, kDataUsage), 1024));
        } else if (arg == "--lines-per-shard") {
            o.lines_per_shard = parse_positive(arg, value, kDataUsage);
        } else if (arg == "--chunk-lines") {
            o.chunk_lines = parse_positive(arg, value, kDataUsage);
        } else {
            throw UsageError(fmt::format("unknown option '{}'", arg), kDataUsage);
        }
    }
    if (o.inputs.empty()) {
        throw UsageError("criteo-preprocess needs --in FILE...", kDataUsage);
    }
    if (o.out_dir.empty()) {
        throw UsageError("criteo-preprocess needs --out DIR", kDataUsage);
    }
    return true;
}

// Table rows: --table-sizes, else MLPerf's with --multi-hot mlperf, else 40 M; then capped by
// --max-ind-range. Multi-hot sizes: --multi-hot, else one-hot.
data::CriteoRecordLayout resolve_layout(const PreprocessArgs& a) {
    data::CriteoRecordLayout layout = a.options.layout;
    const bool mlperf = a.multi_hot == "mlperf";
    if (a.table_sizes == "mlperf" || (a.table_sizes.empty() && mlperf)) {
        layout.num_embeddings = data::mlperf_dcnv2_num_embeddings();
    } else if (!a.table_sizes.empty()) {
        layout.num_embeddings = parse_list("--table-sizes", a.table_sizes);
    } else {
        layout.num_embeddings.assign(data::kCriteoNumSparse, 40000000);
    }
    if (a.max_ind_range > 0) {
        for (int64_t& rows : layout.num_embeddings) {
            rows = std::min(rows, a.max_ind_range);
        }
    }
    if (mlperf) {
        layout.multi_hot = data::mlperf_dcnv2_multi_hot();
    } else if (!a.multi_hot.empty()) {
        layout.multi_hot = parse_list("--multi-hot", a.multi_hot);
    } else {
        layout.multi_hot.assign(data::kCriteoNumSparse, 1);
    }
    if (a.raw_ids) {
        for (const int t : raw_id_columns(a.raw_id_features)) {
            if (layout.multi_hot[static_cast<size_t>(t)] > 1) {
                throw UsageError(fmt::format("--raw-ids: cat_{} has multi-hot size {}, but raw "
                                             "ids are one-hot (materialised bags are defined mod "
                                             "the table's rows)",
                                             t, layout.multi_hot[static_cast<size_t>(t)]),
                                 kDataUsage);
            }
            layout.set_raw(t);
        }
    }
    return layout;
}

int criteo_preprocess_main(const std::vector<std::string>& args) {
    PreprocessArgs a;
    if (!parse_preprocess_args(args, a)) {
        std::fputs(kDataUsage, stdout);
        return 0;
    }
    SR_CHECK(comm::process_info().world_size == 1,
             "criteo-preprocess runs as one process (it has --threads); do not launch it with "
             "mpirun -np {}",
             comm::process_info().world_size);
    a.options.layout = resolve_layout(a);
    const auto t0 = std::chrono::steady_clock::now();
    const data::CriteoPreprocessSummary s = data::preprocess_criteo(a.options);
    const double wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    fmt::print(
        "criteo-preprocess: {} rows in {} ({} bad lines skipped); {} shards written, {} kept "
        "from an earlier run; read {:.1f} MB in {:.2f} s ({:.1f} MB/s); peak RSS {:.1f} MiB; "
        "buffered at most {:.1f} MiB\n",
        s.rows, a.options.out_dir, s.skipped_lines, s.shards_written, s.shards_reused,
        s.bytes_read / 1e6, wall_s, s.bytes_read / 1e6 / std::max(wall_s, 1e-9),
        usage.ru_maxrss / 1024.0, s.peak_buffered_bytes / 1048576.0);
    return 0;
}

}  // namespace

int data_main(const std::vector<std::string>& args) {
    if (args.empty() || args[0] == "--help" || args[0] == "-h") {
        if (args.empty()) {
            throw UsageError("data needs a subcommand", kDataUsage);
        }
        std::fputs(kDataUsage, stdout);
        return 0;
    }
    if (args[0] == "criteo-preprocess") {
        return criteo_preprocess_main({args.begin() + 1, args.end()});
    }
    throw UsageError(fmt::format("unknown data subcommand '{}'", args[0]), kDataUsage);
}

}  // namespace shardrec::cli

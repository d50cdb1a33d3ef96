// bench_comm: an nccl-tests style sweep over the ProcessGroup collectives (MPI backend, host
// tensors). Every timed iteration starts from poisoned outputs and is verified against values
// each rank computes locally from (rank, slot, index), so no number is printed for an output that
// was not checked (#wrong). Launch with mpirun; rank 0 prints.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_env.h"
#include "comm/mpi_process_group.h"
#include "engine/core/error.h"
#include "engine/core/log.h"
#include "engine/core/version.h"
#include "tools/bench_comm/bench_collectives.h"

namespace shardrec::bench {
namespace {

const char* const kUsage =
    "usage: mpirun -np N bench_comm [options]\n"
    "\n"
    "  -b SIZE    smallest buffer in bytes, K/M/G suffixes (default 8)\n"
    "  -e SIZE    largest buffer (default 32M)\n"
    "  -f F       multiply the size by F at each step (default 2)\n"
    "  -w N       warmup iterations per size (default 5)\n"
    "  -n N       timed iterations per size (default 20)\n"
    "  -d DTYPE   f32 (default), i32, i64, i8, u8, f16, bf16 (16-bit floats: no reductions)\n"
    "  -o OPS     comma list of all_to_all_v, all_reduce, reduce_scatter_v, all_gather_v\n"
    "             (default: all)\n"
    "  --json FILE  also write every row as JSON\n"
    "\n"
    "columns (nccl-tests):\n"
    "  bytes    the largest per-rank buffer: the send buffer (all_to_all_v), the tensor\n"
    "           (all_reduce), the input (reduce_scatter_v), the output (all_gather_v)\n"
    "  count    elements in it; a multiple of the number of ranks n except for all_reduce\n"
    "  time_us  mean time of one collective (post + wait), the slowest rank's\n"
    "  algbw    bytes / time, GB/s (1e9)\n"
    "  busbw    algbw * factor, comparable with the link bandwidth:\n"
    "           all_to_all_v, reduce_scatter_v, all_gather_v: (n-1)/n; all_reduce: 2(n-1)/n\n"
    "  #wrong   elements that differ from the expected values, over all timed iterations\n"
    "           and ranks (outputs are poisoned before each iteration)\n"
    "all_to_all_v sends unequal segments (each rank's split to each peer varies by +-50%, like\n"
    "KeyedJaggedTensor lengths); the others use equal segments.\n";

struct Options {
    int64_t min_bytes = 8;
    int64_t max_bytes = int64_t{32} << 20;
    double factor = 2;
    int warmup = 5;
    int iters = 20;
    DType dtype = DType::kF32;
    std::vector<std::string> ops = {"all_to_all_v", "all_reduce", "reduce_scatter_v",
                                    "all_gather_v"};
    std::string json;
};

// ---- the sweep ----

struct Row {
    std::string op;
    int64_t bytes = 0;
    int64_t count = 0;
    double time_us = 0;
    double algbw = 0;
    double busbw = 0;
    int64_t wrong = 0;
};

Row measure(comm::ProcessGroup& pg, const Options& o, const std::string& op, int64_t count) {
    const std::unique_ptr<Collective> c = make_collective(op, pg, count, o.dtype);
    double seconds = 0;
    int64_t wrong = 0;
    for (int it = 0; it < o.warmup + o.iters; ++it) {
        c->reset();
        pg.barrier().wait();  // start together: a late rank would count in the others' time
        const auto start = std::chrono::steady_clock::now();
        c->post().wait();
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
        if (it >= o.warmup) {
            seconds += took.count();
        }
        wrong += c->wrong();  // warmup results are checked too
    }
    Tensor slowest = Tensor::from_vector(std::vector<float>{static_cast<float>(seconds / o.iters)});
    pg.all_reduce(slowest, comm::ReduceOp::kMax).wait();
    Tensor wrong_total = Tensor::from_vector(std::vector<int64_t>{wrong});
    pg.all_reduce(wrong_total, comm::ReduceOp::kSum).wait();

    Row row;
    row.op = op;
    row.count = count;
    row.bytes = count * static_cast<int64_t>(dtype_size(o.dtype));
    const double time_s = slowest.data<float>()[0];
    row.time_us = time_s * 1e6;
    row.algbw = static_cast<double>(row.bytes) / time_s / 1e9;
    row.busbw = row.algbw * busbw_factor(op, pg.size());
    row.wrong = wrong_total.data<int64_t>()[0];
    return row;
}

std::string row_line(const Row& r, DType dtype) {
    return fmt::format("{:>18} {:>12} {:>12} {:>6} {:>11.2f} {:>8.3f} {:>8.3f} {:>7}", r.op,
                       r.bytes, r.count, dtype_name(dtype), r.time_us, r.algbw, r.busbw, r.wrong);
}

std::string row_json(const Row& r, DType dtype, int world_size) {
    return fmt::format(
        "{{{}, \"op\": \"{}\", \"vars\": \"dtype={},count={},ranks={}\", \"bytes\": {}, \"count\": "
        "{}, "
        "\"dtype\": \"{}\", \"time_us\": {:.3f}, \"algbw_gbs\": {:.6f}, \"busbw_gbs\": {:.6f}, "
        "\"wrong\": {}}}",
        provenance_json_fields(), r.op, dtype_name(dtype), r.count, world_size, r.bytes, r.count,
        dtype_name(dtype), r.time_us, r.algbw, r.busbw, r.wrong);
}

void print_header(const Options& o, const comm::ProcessInfo& info) {
    fmt::print("# bench_comm: shardrec {} (commit {}, {} build)\n", version(), git_commit(),
               SHARDREC_BUILD_TYPE);
    fmt::print("# backend: MpiProcessGroup on host tensors, {}\n", comm::mpi_library_version());
    fmt::print("# ranks: {} ({} per node), rank 0 on {}\n", info.world_size, info.local_size,
               info.host);
    fmt::print("# warmup {}, iters {}, dtype {}; busbw factor (n-1)/n, all_reduce 2(n-1)/n\n",
               o.warmup, o.iters, dtype_name(o.dtype));
    fmt::print("#{:>17} {:>12} {:>12} {:>6} {:>11} {:>8} {:>8} {:>7}\n", "op", "bytes", "count",
               "dtype", "time_us", "algbw", "busbw", "#wrong");
    fmt::print("#{:>17} {:>12} {:>12} {:>6} {:>11} {:>8} {:>8} {:>7}\n", "", "", "", "", "",
               "(GB/s)", "(GB/s)", "");
}

// Returns the total #wrong over every row.
int64_t sweep(const Options& o, const comm::ProcessInfo& info) {
    comm::ProcessGroup& pg = *comm::world_process_group();
    const bool rank0 = info.rank == 0;
    if (rank0) {
        print_header(o, info);
    }
    const auto esize = static_cast<int64_t>(dtype_size(o.dtype));
    std::vector<std::string> json_rows;
    int64_t wrong = 0;
    for (const std::string& op : o.ops) {
        const bool reduces = op == "all_reduce" || op == "reduce_scatter_v";
        if (reduces && (o.dtype == DType::kF16 || o.dtype == DType::kBF16)) {
            if (rank0) {
                fmt::print("# {}: skipped, MPI cannot reduce {}\n", op, dtype_name(o.dtype));
            }
            continue;
        }
        for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes;
             bytes =
                 std::max(bytes + 1, static_cast<int64_t>(static_cast<double>(bytes) * o.factor))) {
            int64_t count = bytes / esize;
            if (op != "all_reduce") {
                count -= count % pg.size();
            }
            if (count == 0) {
                continue;
            }
            const Row row = measure(pg, o, op, count);
            wrong += row.wrong;
            if (rank0) {
                fmt::print(" {}\n", row_line(row, o.dtype));
            }
            json_rows.push_back(row_json(row, o.dtype, pg.size()));
        }
    }
    if (rank0) {
        fmt::print("# #wrong total: {} ({})\n", wrong, wrong == 0 ? "OK" : "FAILED");
    }
    if (rank0 && !o.json.empty()) {
        std::ofstream out(o.json);
        SR_CHECK(out.good(), "cannot write {}", o.json);
        out << "[\n";
        for (size_t i = 0; i < json_rows.size(); ++i) {
            out << "  " << json_rows[i] << (i + 1 < json_rows.size() ? ",\n" : "\n");
        }
        out << "]\n";
    }
    return wrong;
}

// ---- command line ----

int64_t parse_size(const std::string& s) {
    size_t used = 0;
    const double v = std::stod(s, &used);
    const std::string suffix = s.substr(used);
    const size_t unit = suffix.size() == 1 ? std::string("KMGkmg").find(suffix[0]) : 0;
    SR_CHECK(suffix.empty() || (suffix.size() == 1 && unit != std::string::npos),
             "size '{}': unknown suffix (K, M or G)", s);
    if (suffix.empty()) {
        return static_cast<int64_t>(v);
    }
    return static_cast<int64_t>(std::ldexp(v, 10 * (static_cast<int>(unit % 3) + 1)));
}

std::vector<std::string> split_commas(const std::string& s) {
    std::vector<std::string> out;
    size_t start = 0;
    for (size_t comma; (comma = s.find(',', start)) != std::string::npos; start = comma + 1) {
        out.push_back(s.substr(start, comma - start));
    }
    out.push_back(s.substr(start));
    return out;
}

// Returns false for --help.
bool parse(const std::vector<std::string>& args, Options& o) {
    using Setter = std::function<void(const std::string&)>;
    const std::map<std::string, Setter> setters = {
        {"-b", [&](const std::string& v) { o.min_bytes = parse_size(v); }},
        {"-e", [&](const std::string& v) { o.max_bytes = parse_size(v); }},
        {"-f", [&](const std::string& v) { o.factor = std::stod(v); }},
        {"-w", [&](const std::string& v) { o.warmup = std::stoi(v); }},
        {"-n", [&](const std::string& v) { o.iters = std::stoi(v); }},
        {"-d", [&](const std::string& v) { o.dtype = dtype_from_name(v); }},
        {"-o", [&](const std::string& v) { o.ops = split_commas(v); }},
        {"--json", [&](const std::string& v) { o.json = v; }},
    };
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "-h" || a == "--help") {
            return false;
        }
        const auto setter = setters.find(a);
        SR_CHECK(setter != setters.end(), "unknown option '{}' (see --help)", a);
        SR_CHECK(i + 1 < args.size(), "option {} needs a value (see --help)", a);
        setter->second(args[++i]);
    }
    SR_CHECK(o.min_bytes > 0 && o.min_bytes <= o.max_bytes, "need 0 < -b <= -e");
    SR_CHECK(o.factor > 1, "-f must be > 1");
    SR_CHECK(o.warmup >= 0 && o.iters > 0, "need -w >= 0 and -n > 0");
    for (const std::string& op : o.ops) {
        SR_CHECK(op == "all_to_all_v" || op == "all_reduce" || op == "reduce_scatter_v" ||
                     op == "all_gather_v",
                 "unknown collective '{}' in -o (see --help)", op);
    }
    return true;
}

}  // namespace
}  // namespace shardrec::bench

int main(int argc, char** argv) {
    using namespace shardrec;
    int rc = 0;
    try {
        const comm::ProcessInfo& info = comm::init_process(&argc, &argv);
        bench::Options options;
        if (!bench::parse(std::vector<std::string>(argv + 1, argv + argc), options)) {
            if (info.rank == 0) {
                std::fputs(bench::kUsage, stdout);
            }
        } else {
            rc = bench::sweep(options, info) == 0 ? 0 : 1;
        }
    } catch (const std::exception& e) {
        // Every rank parses the same arguments, but a collective failure may hit one rank only.
        log::all().error("{}", e.what());
        if (comm::process_info().world_size > 1) {
            comm::abort_process(1);
        }
        rc = 1;
    }
    comm::finalize_process();
    return rc;
}

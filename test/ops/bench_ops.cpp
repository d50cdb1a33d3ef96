// bench_ops: times the backend-ops cases (ggml's perf mode) on the CPU or on CUDA. Every case is
// checked against the float64 reference before it is timed; a case that fails prints #wrong and
// no rate. Ceilings are measured at startup, never taken from spec sheets: the copy bandwidth of
// the device (host memcpy, or a device-to-device cudaMemcpy, of a buffer far larger than the
// caches, bytes read + written), for the embedding ops on the CPU the random-row read bandwidth
// of the op's table size and row width (%rr: kernels::host_random_row_gbps), and, for GEMM-shaped
// ops, the time of the BLAS's own GEMM on the
// same shapes (cblas_sgemm, or cuBLAS). On CUDA a timed run is the case's launches followed by a
// synchronisation of its stream. --gemm-math tf32|bf16 times the cases and the BLAS's GEMM in
// that runtime.gemm_math mode (CUDA); the outputs are still checked with f32 GEMMs first.
// --hot-rows block times the CUDA embedding backward with its earlier hot-row kernel
// (runtime.hot_row_update). --once runs each selected case once, neither checked nor timed, for
// a profiler to time its kernels (scripts/gpu_check.sh's kernels step, under Nsight Compute).
// --row-invariant times the CPU cases in scoring's GEMM mode (kernels::set_row_invariant_gemms:
// predict, serve, eval), against the same cblas_sgemm column.
//
//   bench_ops [--device cpu|cuda] [--filter SUBSTR|^PREFIX] [--bench-only] [--reps R]
//             [--gemm-math M] [--hot-rows chunked|block] [--row-invariant] [--json FILE] [--once]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "engine/core/allocator.h"
#include "engine/core/cuda/cuda_runtime_api.h"
#include "engine/core/version.h"
#include "kernels/device_ceilings.h"
#include "kernels/embedding_bag.h"
#include "kernels/linear.h"
#include "test/ops/op_case.h"

using namespace shardrec;
using namespace shardrec::test;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Timing {
    double med_us, p10_us, p90_us;
};

template <typename Fn>
Timing time_it(Fn&& fn, int reps) {
    fn();  // warm-up
    std::vector<double> us;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = Clock::now();
        fn();
        us.push_back(seconds_since(t0) * 1e6);
    }
    std::sort(us.begin(), us.end());
    auto at = [&](double q) {
        return us[static_cast<size_t>(q * static_cast<double>(us.size() - 1))];
    };
    return {at(0.5), at(0.1), at(0.9)};
}

double sgemm_time_us(const std::vector<OpCase::Gemm>& gemms, int reps, Device device) {
    double total = 0;
    for (const auto& g : gemms) {
        total += device.is_cuda() ? kernels::cuda::sgemm_time_us(device.index, g.m, g.n, g.k, reps)
                                  : kernels::host_sgemm_time_us(g.m, g.n, g.k, reps);
    }
    return total;
}

}  // namespace

int main(int argc, char** argv) {
    std::string filter, json_path;
    int reps = 20;
    bool bench_only = false;  // only the cases made for timing, not the small test vectors
    bool once = false;
    bool row_invariant = false;
    Device device = Device::cpu();
    kernels::GemmMath timed_math = kernels::GemmMath::kF32;
    std::string timed_math_name = "f32";
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--device" && i + 1 < argc) {
            device = Device::parse(argv[++i]);
        } else if (a == "--filter" && i + 1 < argc) {
            filter = argv[++i];
        } else if (a == "--bench-only") {
            bench_only = true;
        } else if (a == "--reps" && i + 1 < argc) {
            reps = std::max(1, std::atoi(argv[++i]));
        } else if (a == "--json" && i + 1 < argc) {
            json_path = argv[++i];
        } else if (a == "--row-invariant") {
            row_invariant = true;
        } else if (a == "--once") {
            once = true;
        } else if (a == "--gemm-math" && i + 1 < argc) {
            timed_math_name = argv[++i];
            timed_math = kernels::gemm_math_from_name(timed_math_name);
        } else if (a == "--hot-rows" && i + 1 < argc) {
            kernels::set_hot_row_update(kernels::hot_row_update_from_name(argv[++i]));
        } else {
            std::fprintf(
                stderr,
                "usage: bench_ops [--device cpu|cuda] [--filter SUBSTR|^PREFIX] [--bench-only] "
                "[--reps R] [--gemm-math f32|tf32|bf16] [--hot-rows chunked|block] "
                "[--row-invariant] "
                "[--json FILE] [--once]\n");
            return 2;
        }
    }
    if (device.is_cuda() && device.index >= cuda::device_count()) {
        std::fprintf(stderr, "bench_ops: %s is not available (%d CUDA devices visible)\n",
                     device.str().c_str(), cuda::device_count());
        return 1;
    }
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each row as it is measured, even when piped
    std::vector<std::unique_ptr<OpCase>> cases = all_op_cases();
    // --filter matches a substring of OP(VARS), or with a leading ^ its start.
    auto selected = [&](const OpCase& c) {
        const std::string id = std::string(kernels::op_name(c.kind())) + "(" + c.vars() + ")";
        const bool match =
            filter.empty() || (filter[0] == '^' ? id.rfind(filter.substr(1), 0) == 0
                                                : id.find(filter) != std::string::npos);
        return match && !(bench_only && !c.bench_only()) && !(c.cpu_only() && device.is_cuda());
    };
    if (once) {
        kernels::set_gemm_math(timed_math);
        for (auto& c : cases) {
            if (!selected(*c))
                continue;
            c->make_inputs(test_seed());
            c->set_device(device);
            c->clear_outputs();
            (void)c->run(device);
            c->stream().synchronize();
            c->clear_outputs();
            std::printf("# ran %s(%s)\n", kernels::op_name(c->kind()), c->vars().c_str());
            c.reset();
        }
        return 0;
    }
    const double copy_gbps = device.is_cuda() ? kernels::cuda::measure_copy_gbps(device.index)
                                              : kernels::host_copy_gbps();
    std::printf("# device %s, %s copy bandwidth (read+write): %.2f GB/s\n", device.str().c_str(),
                device.is_cuda() ? "device-to-device cudaMemcpy" : "host memcpy", copy_gbps);
    if (device.is_cuda()) {
        std::printf(
            "# random row gather (read+write, a row index then 16-byte loads, 2 GiB table): "
            "128 B rows %.2f GB/s, 256 B rows %.2f GB/s, 512 B rows %.2f GB/s\n",
            kernels::cuda::measure_gather_gbps(device.index, 128),
            kernels::cuda::measure_gather_gbps(device.index, 256),
            kernels::cuda::measure_gather_gbps(device.index, 512));
    }
    if (row_invariant) {
        std::printf(
            "# row-invariant GEMMs (predict, serve, eval): outputs checked, then timed "
            "in that mode; the sgemm_us column is cblas_sgemm's\n");
    }
    if (timed_math != kernels::GemmMath::kF32) {
        std::printf(
            "# gemm_math %s: outputs checked with f32 GEMMs, then timed in %s, as is the "
            "sgemm_us column\n",
            timed_math_name.c_str(), timed_math_name.c_str());
    }
    std::printf("%-32s %-48s %10s %10s %10s %9s %9s %7s %7s %9s %7s %6s\n", "op", "vars", "med_us",
                "p10_us", "p90_us", "GB/s", "GFLOP/s", "%bw", "%rr", "sgemm_us", "%gemm", "#wrong");
    std::vector<std::string> rows;
    const std::string provenance = provenance_json_fields();  // commit and date of every row
    // The large cases (seconds each, for their inputs and float64 references) after all the
    // others, so that a time limit cuts only the last of them.
    std::stable_partition(cases.begin(), cases.end(),
                          [](const std::unique_ptr<OpCase>& c) { return !c->large_bench(); });
    for (auto& c : cases) {
        const std::string name = kernels::op_name(c->kind());
        if (!selected(*c)) {
            continue;
        }
        // Tables past the caches only: a small table's rows are cache hits whatever the order.
        OpCase::RandomRows rr = device.is_cuda() ? OpCase::RandomRows{} : c->random_rows();
        if (rr.row_bytes % 4 != 0 || rr.table_bytes < (size_t{32} << 20)) {
            rr = OpCase::RandomRows{};
        }
        // Verify first: a number is printed only for an output that was checked.
        kernels::set_row_invariant_gemms(row_invariant);
        c->make_inputs(test_seed());
        const auto ref = c->reference();
        c->set_device(device);
        c->clear_outputs();
        const auto got = c->run(device);
        c->stream().synchronize();
        int wrong = c->check_guards().empty() ? 0 : 1;
        for (size_t i = 0; i < ref.size(); ++i) {
            const auto g =
                ref[i].index.empty() ? to_double(got[i]) : to_double(got[i], ref[i].index);
            const std::vector<float> gf(g.begin(), g.end());
            const CompareResult r = compare(gf, ref[i].value, ref[i].mag, c->tolerance(i));
            if (!r.ok) {
                std::fprintf(stderr, "# %s %s: output %s: %s\n", name.c_str(), c->vars().c_str(),
                             ref[i].name.c_str(), r.report.c_str());
                ++wrong;
            }
        }
        c->reuse_outputs(true);
        kernels::set_gemm_math(timed_math);
        const Timing t = time_it(
            [&] {
                c->clear_outputs();
                (void)c->run(device);
                c->stream().synchronize();
            },
            reps);
        kernels::set_row_invariant_gemms(false);
        c->reuse_outputs(false);
        c->clear_outputs();
        const double gbps = c->bytes() / (t.med_us * 1e-6) / 1e9;
        const double gflops = c->flops() / (t.med_us * 1e-6) / 1e9;
        const double sgemm_us = c->gemms().empty() ? 0.0 : sgemm_time_us(c->gemms(), reps, device);
        kernels::set_gemm_math(kernels::GemmMath::kF32);
        const double pct_bw = c->bytes() > 0 ? 100.0 * gbps / copy_gbps : 0.0;
        const double pct_gemm = sgemm_us > 0 ? 100.0 * sgemm_us / t.med_us : 0.0;
        // Right after the case's timing, so that both see the same machine (a shared host's
        // bandwidth drifts by 2x within a minute); the case's table is in memory beside it.
        const double rr_gbps =
            rr.row_bytes > 0 ? kernels::host_random_row_gbps(rr.row_bytes, rr.table_bytes) : 0.0;
        if (rr.row_bytes > 0) {
            std::printf(
                "# random rows of %ld B from a %.1f MiB table (read, rows + 8-byte "
                "indices): %.2f GB/s\n",
                static_cast<long>(rr.row_bytes), static_cast<double>(rr.table_bytes) / 1048576.0,
                rr_gbps);
        }
        const double pct_rr = rr_gbps > 0 && c->bytes() > 0 ? 100.0 * gbps / rr_gbps : 0.0;
        std::printf("%-32s %-48s %10.1f %10.1f %10.1f %9.2f %9.2f %7.1f %7.1f %9.1f %7.1f %6d\n",
                    name.c_str(), c->vars().c_str(), t.med_us, t.p10_us, t.p90_us, gbps, gflops,
                    pct_bw, pct_rr, sgemm_us, pct_gemm, wrong);
        // The large tables' pages, while the case's inputs are alive.
        std::string huge_pages = "null";
        if (c->large_bench() && device.is_cpu()) {
            const HugePageUsage hp = huge_page_usage();
            std::printf("#   %s\n",
                        describe_huge_pages(hp, static_cast<int64_t>(rr.table_bytes)).c_str());
            huge_pages =
                fmt::format("{{\"mode\":\"{}\",\"anon_huge_bytes\":{},\"table_bytes\":{}}}",
                            hp.mode, hp.anon_huge_bytes, rr.table_bytes);
        }
        rows.push_back(fmt::format(
            "{{{},\"device\":\"{}\",\"gemm_math\":\"{}\",\"row_invariant\":{},\"op\":\"{}\","
            "\"vars\":\"{}\",\"time_us\":"
            "{:."
            "3f},\"p10_us\":{:.3f}"
            ",\"p90_us\":{:.3f}"
            ","
            "\"bytes\":{:.0f},\"flops\":{:.0f},\"gbps\":{:.4f},\"gflops\":{:.4f},"
            "\"copy_gbps\":{:.4f},\"pct_bw\":{:.2f},\"random_row_gbps\":{:.4f},\"pct_rr\":{:.2f},"
            "\"sgemm_us\":{:.3f},\"pct_gemm\":{:.2f},\"huge_pages\":{},\"wrong\":{}}}",
            provenance, device.str(), timed_math_name, row_invariant, name, c->vars(), t.med_us,
            t.p10_us, t.p90_us, c->bytes(), c->flops(), gbps, gflops, copy_gbps, pct_bw, rr_gbps,
            pct_rr, sgemm_us, pct_gemm, huge_pages, wrong));
        c.reset();  // its inputs go: the large cases' 2 GiB tables together outgrow a host
    }
    if (!json_path.empty()) {
        std::ofstream out(json_path);
        out << "[\n";
        for (size_t i = 0; i < rows.size(); ++i)
            out << "  " << rows[i] << (i + 1 < rows.size() ? ",\n" : "\n");
        out << "]\n";
    }
    return 0;
}

#include "test/support/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "engine/core/error.h"
#include "engine/core/log.h"

namespace shardrec::test {
namespace {

int g_expect_depth = 0;
int g_unexpected = 0;

}  // namespace

uint64_t test_seed() {
    const char* s = std::getenv("SHARDREC_TEST_SEED");
    return s ? std::strtoull(s, nullptr, 10) : 1234;
}

CompareResult compare(const std::vector<double>& got,
                      const std::vector<double>& ref,
                      const std::vector<double>& mag,
                      const Tolerance& tol) {
    CompareResult r;
    if (got.size() != ref.size() || ref.size() != mag.size()) {
        r.ok = false;
        r.report =
            fmt::format("size mismatch: got {} ref {} mag {}", got.size(), ref.size(), mag.size());
        return r;
    }
    double worst_excess = -1.0;
    size_t worst = 0;
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double g = got[i];
        const double e = ref[i];
        bool ok;
        if (std::isnan(e) || std::isnan(g)) {
            ok = std::isnan(e) && std::isnan(g);
        } else if (std::isinf(e) || std::isinf(g)) {
            ok = g == e;
        } else if (tol.exact) {
            ok = g == e;
        } else {
            ok = std::fabs(g - e) <= tol.bound(mag[i]);
        }
        const double excess =
            ok ? -1.0
               : (std::isfinite(g - e) ? std::fabs(g - e) / (tol.bound(mag[i]) + 1e-300) : 1e300);
        if (!ok)
            ++bad;
        if (excess > worst_excess) {
            worst_excess = excess;
            worst = i;
        }
    }
    if (bad > 0) {
        r.ok = false;
        r.report = fmt::format(
            "{} of {} elements out of bound; worst at [{}]: got {:.9g} ref {:.17g} bound {:.3g} "
            "(seed {})",
            bad, got.size(), worst, got[worst], ref[worst], tol.bound(mag[worst]), test_seed());
    }
    return r;
}

CompareResult compare(const std::vector<float>& got,
                      const std::vector<double>& ref,
                      const std::vector<double>& mag,
                      const Tolerance& tol) {
    return compare(std::vector<double>(got.begin(), got.end()), ref, mag, tol);
}

CompareResult compare_relative(const std::vector<double>& got,
                               const std::vector<double>& want,
                               double rel,
                               double atol) {
    double scale = 0.0;
    for (const double w : want) {
        if (std::isfinite(w))
            scale = std::max(scale, std::fabs(w));
    }
    std::vector<double> mag(want.size());
    for (size_t i = 0; i < want.size(); ++i)
        mag[i] = std::fabs(want[i]) + scale;
    return compare(got, want, mag, Tolerance::relative(rel, atol));
}

CompareResult compare(const Tensor& got,
                      const std::vector<double>& ref,
                      const std::vector<double>& mag,
                      const Tolerance& tol) {
    return compare(got.to_vector<float>(), ref, mag, tol);
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

bool logs_expected() {
    return g_expect_depth > 0;
}

void record_unexpected_log(const std::string& msg) {
    ++g_unexpected;
    std::fprintf(stderr, "unexpected warning/error log: %s\n", msg.c_str());
}

int unexpected_log_count() {
    return g_unexpected;
}

ExpectLogs::ExpectLogs() {
    ++g_expect_depth;
}

ExpectLogs::~ExpectLogs() {
    --g_expect_depth;
}

namespace {
std::string g_not_run;
}  // namespace

void not_run(const std::string& why) {
    g_not_run = why.empty() ? "no reason given" : why;
}

std::string take_not_run() {
    std::string why;
    why.swap(g_not_run);
    return why;
}

}  // namespace shardrec::test

// Test helpers: derived tolerances (STYLE.md R3), element-wise comparison that reports the worst
// element and the seed, the test seed from SHARDREC_TEST_SEED, and unexpected-log tracking.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace shardrec::test {

uint64_t test_seed();  // SHARDREC_TEST_SEED, default 1234

// |got - ref| <= atol + ((K + 1) * u_acc + u_out) * mag, element-wise.
struct Tolerance {
    double atol = 0.0;
    int64_t terms = 1;         // K: accumulated terms (bag length, GEMM depth)
    double u_acc = 0x1.0p-24;  // fp32 accumulation
    double u_out = 0x1.0p-24;  // output dtype roundoff
    double extra_rel = 0.0;    // documented slack where a case needs it
    bool exact = false;        // bitwise equality

    // atol + rel * mag, no roundoff terms: for references that carry their own error estimate.
    static Tolerance relative(double rel, double atol = 0.0) {
        Tolerance t;
        t.atol = atol;
        t.terms = 0;
        t.u_acc = 0.0;
        t.u_out = 0.0;
        t.extra_rel = rel;
        return t;
    }

    double bound(double mag) const {
        return atol + ((static_cast<double>(terms) + 1) * u_acc + u_out + extra_rel) * mag;
    }
};

struct CompareResult {
    bool ok = true;
    std::string report;  // worst element, NaN disagreement, sizes
};

// The one comparator of the suite. ref and mag are float64 of the same length as got (mag = sum
// of |terms| per element). NaN matches only NaN, an infinity only the same infinity; anything
// else must lie within tol.bound(mag) of ref.
CompareResult compare(const std::vector<double>& got,
                      const std::vector<double>& ref,
                      const std::vector<double>& mag,
                      const Tolerance& tol);
CompareResult compare(const std::vector<float>& got,
                      const std::vector<double>& ref,
                      const std::vector<double>& mag,
                      const Tolerance& tol);
CompareResult compare(const Tensor& got,
                      const std::vector<double>& ref,
                      const std::vector<double>& mag,
                      const Tolerance& tol);

// compare() for a float64 result against a float64 reference (a finite difference, a reference
// forward): |got_i - want_i| <= atol + rel * (|want_i| + max_j |want_j|). The bound scales with
// the data (a finite difference's error scales with the whole vector, not with each element), so
// a wrong small element fails where a floor of 1 would let it pass.
CompareResult compare_relative(const std::vector<double>& got,
                               const std::vector<double>& want,
                               double rel,
                               double atol = 0.0);

// CHECKs compare_relative, reporting the worst element.
#define CHECK_RELATIVE(got, want, rel)                                \
    do {                                                              \
        const ::shardrec::test::CompareResult r_ =                    \
            ::shardrec::test::compare_relative((got), (want), (rel)); \
        INFO(r_.report);                                              \
        CHECK(r_.ok);                                                 \
    } while (false)

// REQUIREs |got[i] - want[i]| <= abs + rel * |want[i]| for every i (and equal sizes); a failure
// names `what`, the index and both values.
void require_close(const std::vector<float>& got,
                   const std::vector<float>& want,
                   double abs,
                   double rel,
                   const std::string& what);

// The message of the shardrec::Error that f throws; "" when it throws none.
std::string error_of(const std::function<void()>& f);

// Logs at warn or above fail the test unless inside an ExpectLogs scope.
bool logs_expected();
void record_unexpected_log(const std::string& msg);
int unexpected_log_count();

class ExpectLogs {
public:
    ExpectLogs();
    ~ExpectLogs();
    ExpectLogs(const ExpectLogs&) = delete;
    ExpectLogs& operator=(const ExpectLogs&) = delete;
};

// Marks the running test case as not run, for `why` (what this machine lacks: an instruction set,
// a file system, a privilege), and returns to it so it can return. Such a case may assert
// nothing; the test's main lists it as "not run: <case> (<why>)", scripts/test.sh counts it apart
// from the passed, never as passed.
void not_run(const std::string& why);
// The reason given in the running case ("" if none), cleared.
std::string take_not_run();

}  // namespace shardrec::test

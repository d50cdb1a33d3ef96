// The `shardrec` subcommands. main.cpp bootstraps MPI, dispatches here and decides how a failure
// ends the process: UsageError exits 2, shardrec::Error exits 1 (MPI_Abort with several ranks).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace shardrec::cli {

// A malformed command line. The message is printed with the subcommand's usage; exit code 2.
class UsageError : public std::runtime_error {
public:
    UsageError(const std::string& message, const char* usage)
        : std::runtime_error(message), usage_(usage) {}

    const char* usage() const { return usage_; }

private:
    const char* usage_;
};

extern const char* const kMainUsage;
extern const char* const kTrainUsage;
extern const char* const kValidateUsage;
extern const char* const kBenchUsage;
extern const char* const kPlanUsage;
extern const char* const kCkptUsage;
extern const char* const kDataUsage;
extern const char* const kEvalUsage;

// Each takes the arguments after its own name and returns the exit code.
int train_main(const std::vector<std::string>& args);
int validate_main(const std::vector<std::string>& args);
int version_main();
int bench_main(const std::vector<std::string>& args);
int plan_main(const std::vector<std::string>& args);
int ckpt_main(const std::vector<std::string>& args);
int data_main(const std::vector<std::string>& args);
int eval_main(const std::vector<std::string>& args);
int predict_main(const std::vector<std::string>& args);
int serve_main(const std::vector<std::string>& args);

// `--set K=V` and `--set=K=V`: true (and the value appended) when args[i] is one; advances i
// past its value. Throws UsageError when the value is missing.
bool take_set(const std::vector<std::string>& args,
              size_t& i,
              std::vector<std::string>& sets,
              const char* usage);

// A positive integer option's value (`option` names it); UsageError with `usage` otherwise.
int64_t parse_positive(const std::string& option, const std::string& text, const char* usage);

// An output file's option (`option` names it, e.g. "--out"), checked on every rank before any
// work: its directory exists and is writable, and the path is not a directory. Throws Error.
void check_output_file(const std::string& option, const std::string& path);

}  // namespace shardrec::cli

#include "engine/core/input_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "engine/core/error.h"

namespace shardrec {

std::string input_file_problem(const std::string& path) {
    struct stat st {};

    if (::stat(path.c_str(), &st) != 0) {
        return errno == ENOENT || errno == ENOTDIR
                   ? "does not exist"
                   : fmt::format("cannot be read: {}", std::strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) {
        return "is a directory, expected a file";
    }
    if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
        return "is a device, expected a file";
    }
    if (S_ISSOCK(st.st_mode)) {
        return "is a socket, expected a file";
    }
    // Permissions as the process really has them (root reads anything; ACLs count). A pipe is
    // not opened here: that could block, or take data from its writer.
    if (!S_ISFIFO(st.st_mode) && ::access(path.c_str(), R_OK) != 0) {
        return fmt::format("cannot be read: {}", std::strerror(errno));
    }
    return "";
}

void check_input_file(const std::string& path, const std::string& what) {
    const std::string problem = input_file_problem(path);
    if (!problem.empty()) {
        throw Error(fmt::format("{}: {} '{}' {}", error_context(), what, path, problem));
    }
}

std::ifstream open_input_file(const std::string& path, const std::string& what) {
    check_input_file(path, what);
    std::ifstream in(path, std::ios::binary);
    if (!in.is_open()) {
        throw Error(fmt::format("{}: {} '{}' cannot be opened: {}", error_context(), what, path,
                                std::strerror(errno)));
    }
    return in;
}

std::string read_input_file(const std::string& path, const std::string& what) {
    std::ifstream in = open_input_file(path, what);
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) {
        throw Error(fmt::format("{}: {} '{}' cannot be read", error_context(), what, path));
    }
    return text.str();
}

}  // namespace shardrec

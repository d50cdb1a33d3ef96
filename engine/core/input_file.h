// Reading a file a user named (a config, a plan, a Criteo day, a data shard): one check that says
// what is wrong with the path in words ("the plan file 'p.yaml' is a directory, expected a file")
// before any stream or mmap fails with its own message (a directory opens, then reads fail with
// "basic_filebuf::underflow ... Is a directory").
#pragma once

#include <fstream>
#include <string>

namespace shardrec {

// "" when `path` names a file that can be opened for reading (a regular file, or a pipe such as
// `<(...)`), else why not: "does not exist", "is a directory, expected a file", "is a device,
// expected a file", "is a socket, expected a file" or "cannot be read: <strerror>".
std::string input_file_problem(const std::string& path);

// Throws an Error "<what> '<path>' <problem>" (what: "the plan file (sharding.plan_file)") when
// input_file_problem finds one.
void check_input_file(const std::string& path, const std::string& what);

// check_input_file, then the file opened in binary mode.
std::ifstream open_input_file(const std::string& path, const std::string& what);

// check_input_file, then the whole file; a read error names the file too.
std::string read_input_file(const std::string& path, const std::string& what);

}  // namespace shardrec

// Atomic writes, OutputFile / InputFile and their errors, and the plain file name rule.
#include "../catch_after_torch.h"

#include <nnx/checkpoint/file_io.h>
#include <nnx/core/error.h>

#include <filesystem>
#include <utility>

#include "format_test_util.h"

using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using nnx::checkpoint::InputFile;
using nnx::checkpoint::OutputFile;
using nnx_format_test::read_bytes;
using nnx_format_test::TempDir;

namespace {
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}
}  // namespace

TEST_CASE("write_file_atomically replaces the file and leaves no temp file behind") {
  TempDir dir;
  const auto path = dir.file("manifest.json");
  nnx::checkpoint::write_file_atomically(path, "first");
  CHECK(read_bytes(path) == "first");
  nnx::checkpoint::write_file_atomically(path, std::string("a\0b", 3));
  CHECK(read_bytes(path) == std::string("a\0b", 3));
  nnx::checkpoint::write_file_atomically(path, "");
  CHECK(read_bytes(path).empty());
  CHECK(entries(dir.path()) == std::vector<std::string>{"manifest.json"});
}

TEST_CASE("write_file_atomically into a missing directory names the path and the reason") {
  TempDir dir;
  const auto path = dir.file("missing/manifest.json");
  CHECK_THROWS_AS(nnx::checkpoint::write_file_atomically(path, "x"), nnx::Error);
  CHECK_THROWS_WITH(nnx::checkpoint::write_file_atomically(path, "x"),
                    Contains(path) && Contains("No such file or directory"));
  CHECK(entries(dir.path()).empty());
}

TEST_CASE("OutputFile counts written bytes and InputFile reads them back at offsets") {
  TempDir dir;
  const auto path = dir.file("data.bin");
  OutputFile out(path);
  out.write("hello ", 6);
  out.write("world", 5);
  out.write(nullptr, 0);
  CHECK(out.size() == 11);
  out.sync_and_close();
  CHECK_THROWS_WITH(out.write("x", 1), Equals("[write] '" + path + "' is already closed"));
  CHECK(read_bytes(path) == "hello world");

  InputFile in(path);
  CHECK(in.size() == 11);
  char buf[5];
  in.read_at(6, buf, 5);
  CHECK(std::string(buf, 5) == "world");
  CHECK(in.read_string(0, 5) == "hello");
  CHECK(in.read_string(11, 0).empty());
  InputFile moved = std::move(in);
  CHECK(moved.read_string(4, 3) == "o w");
  CHECK(moved.path() == path);
}

TEST_CASE("reading past the end of an InputFile is a truncation error with the byte range") {
  TempDir dir;
  const auto path = dir.file("short.bin");
  nnx_format_test::write_bytes(path, "0123456789");
  InputFile in(path);
  char buf[16];
  CHECK_THROWS_WITH(
      in.read_at(5, buf, 10),
      Equals("[read_at] '" + path + "' is truncated: needs bytes [5, 15) but has 10 bytes"));
  CHECK_THROWS_WITH(
      in.read_at(11, buf, 0),
      Equals("[read_at] '" + path + "' is truncated: needs bytes [11, 11) but has 10 bytes"));
  CHECK_THROWS_WITH(in.read_at(UINT64_MAX - 1, buf, 10),
                    Equals("[read_at] '" + path +
                           "' is truncated: needs 10 bytes from byte "
                           "18446744073709551614 but has 10 bytes"));
  CHECK_THROWS_WITH(in.read_string(8, 3), Contains("needs bytes [8, 11) but has 10 bytes"));
}

TEST_CASE("opening a missing file or a directory for reading is an error naming it") {
  TempDir dir;
  CHECK_THROWS_WITH(InputFile(dir.file("nope.bin")),
                    Equals("[InputFile] could not open '" + dir.file("nope.bin") +
                           "' for reading: No such file or directory"));
  CHECK_THROWS_WITH(InputFile(dir.path()),
                    Equals("[InputFile] '" + dir.path() + "' is not a regular file"));
  CHECK_THROWS_WITH(OutputFile(dir.file("no/such/dir.bin")),
                    Contains(dir.file("no/such/dir.bin")) && Contains("No such file or directory"));
}

TEST_CASE("fsync_directory accepts a directory and names a missing one") {
  TempDir dir;
  CHECK_NOTHROW(nnx::checkpoint::fsync_directory(dir.path()));
  CHECK_THROWS_WITH(nnx::checkpoint::fsync_directory(dir.file("gone")),
                    Contains(dir.file("gone")) && Contains("No such file or directory"));
}

TEST_CASE("plain file names stay inside the checkpoint directory") {
  using nnx::checkpoint::check_plain_file_name;
  for (const char* ok :
       {"shard-00001-of-00008.safetensors", "manifest.json", "a", "A_b-9.x.y", "x.."})
    CHECK_NOTHROW(check_plain_file_name(ok, "test"));
  CHECK_NOTHROW(check_plain_file_name(std::string(255, 'a'), "test"));
  for (const char* bad : {"", ".", "..", ".hidden", "../escape", "a/b", "/abs", "a b", "tab\t",
                          "caf\xc3\xa9", "a\\b"})
    CHECK_THROWS_AS(check_plain_file_name(bad, "test"), nnx::Error);
  CHECK_THROWS_AS(check_plain_file_name(std::string(256, 'a'), "test"), nnx::Error);
  CHECK_THROWS_AS(check_plain_file_name(std::string("a\0b", 3), "test"), nnx::Error);
  CHECK_THROWS_WITH(check_plain_file_name("../etc/passwd", "files[0] in 'c/manifest.json'"),
                    Contains("files[0] in 'c/manifest.json': '../etc/passwd' is not a plain file "
                             "name: checkpoint file names must stay inside the checkpoint "
                             "directory"));
  CHECK_THROWS_WITH(check_plain_file_name(std::string(300, 'a'), "x"),
                    Contains("x: a name of 300 characters is not a plain file name"));
}

// The safetensors writer's exact layout, reading back, hand-built headers, and every way a
// header or file can be rejected (each error names the file and, where known, the tensor).
#include "../catch_after_torch.h"

#include <nnx/checkpoint/crc32c.h>
#include <nnx/checkpoint/detail/write_pace.h>
#include <nnx/checkpoint/safetensors.h>
#include <nnx/core/error.h>

#include <sys/resource.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "format_test_util.h"

using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using Catch::Matchers::StartsWith;
using namespace nnx::checkpoint;
using nnx_format_test::TempDir;

namespace {

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

std::string file_bytes(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

// Parses a header for a data section of data_size bytes, as file "m.safetensors".
SafetensorsHeader parse(const std::string& header, uint64_t data_size) {
  return parse_safetensors_header(header, data_size, "m.safetensors");
}

}  // namespace

TEST_CASE("write_safetensors lays out length, padded header and data byte for byte") {
  TempDir dir;
  const unsigned char a[2] = {1, 2};
  auto written = write_safetensors(dir.file("x.safetensors"), {{"a", "U8", {2}, a, 2}});
  const std::string json = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})";
  REQUIRE(json.size() == 53);
  const std::string expected = std::string("8\0\0\0\0\0\0\0", 8) + json + "   " + "\x01\x02";
  CHECK(nnx_format_test::read_bytes(dir.file("x.safetensors")) == expected);
  REQUIRE(written.size() == 1);
  CHECK(written[0].name == "a");
  CHECK(written[0].file_offset == 64);
  CHECK(written[0].nbytes == 2);
  CHECK(written[0].crc32c == crc32c(a, 2));
}

TEST_CASE("a written safetensors file reads back with its header, bytes and checksums") {
  TempDir dir;
  const auto path = dir.file("shard-0.safetensors");
  const float w[6] = {1, 2, 3, 4, 5, 6};
  const int64_t idx[4] = {-1, 0, 7, 1LL << 40};
  const double s = 2.5;
  const std::string digits = "123456789";
  auto written = write_safetensors(path,
                                   {{"layer.w", "F32", {2, 3}, w, sizeof w},
                                    {"idx", "I64", {4}, idx, sizeof idx},
                                    {"empty", "BOOL", {0, 3}, nullptr, 0},
                                    {"scale", "F64", {}, &s, sizeof s},
                                    {"digits", "U8", {9}, digits.data(), 9}},
                                   {{"format", "pt"}, {"step", "12"}});
  InputFile file(path);
  auto h = read_safetensors_header(file, path);
  CHECK(h.data_start % 8 == 0);
  CHECK(h.data_start + h.data_size == file.size());
  CHECK(h.data_size == 24 + 32 + 0 + 8 + 9);
  CHECK(h.metadata == std::map<std::string, std::string>{{"format", "pt"}, {"step", "12"}});
  REQUIRE(h.tensors.size() == 5);
  const auto& lw = h.at("layer.w", path);
  CHECK(lw.dtype == "F32");
  CHECK(lw.shape == std::vector<int64_t>{2, 3});
  CHECK((lw.begin == 0 && lw.end == 24));
  CHECK((h.at("idx", path).begin == 24 && h.at("idx", path).end == 56));
  CHECK((h.at("empty", path).begin == 56 && h.at("empty", path).end == 56));
  CHECK(h.at("scale", path).shape.empty());
  CHECK((h.at("digits", path).begin == 64 && h.at("digits", path).end == 73));
  for (size_t i = 1; i < h.tensors.size(); ++i) CHECK(h.tensors[i - 1].begin <= h.tensors[i].begin);
  CHECK(h.find("nope") == nullptr);

  REQUIRE(written.size() == 5);
  const void* sources[] = {w, idx, nullptr, &s, digits.data()};
  for (size_t i = 0; i < written.size(); ++i) {
    const auto& t = h.at(written[i].name, path);
    CHECK(written[i].file_offset == h.data_start + t.begin);
    CHECK(written[i].nbytes == t.end - t.begin);
    std::string bytes = file.read_string(written[i].file_offset, written[i].nbytes);
    CHECK((written[i].nbytes == 0 || std::memcmp(bytes.data(), sources[i], bytes.size()) == 0));
    CHECK(written[i].crc32c == crc32c(bytes.data(), bytes.size()));
  }
  CHECK(written[4].crc32c == 0xE3069283u);  // CRC-32C of "123456789"
  CHECK(written[2].crc32c == 0u);
}

TEST_CASE("a paced writer (a background save's) writes the same bytes and checksums in pieces, "
          "pausing between them") {
  TempDir dir;
  // 2.5 pieces, then a tensor that starts inside the third piece.
  namespace pacing = nnx::checkpoint::detail;
  const auto floats = static_cast<int64_t>(pacing::kPacedPieceBytes * 5 / 2 / sizeof(float));
  std::vector<float> big(static_cast<size_t>(floats));
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 977) - 3.5f;
  const double tail[3] = {1.5, -2, 1e300};
  const std::vector<TensorToWrite> tensors{{"big", "F32", {floats}, big.data(), big.size() * 4},
                                           {"tail", "F64", {3}, tail, sizeof tail}};
  const auto plain = write_safetensors(dir.file("plain.safetensors"), tensors);
  std::vector<WrittenTensor> paced;
  double pace_seen = -1;
  int64_t pauses = -1;
  const int64_t pauses_here = pacing::paced_pauses();
  std::thread([&] {
    pacing::set_write_pace(0.5);
    paced = write_safetensors(dir.file("paced.safetensors"), tensors);
    pace_seen = pacing::write_pace();
    pauses = pacing::paced_pauses();
  }).join();
  CHECK(pace_seen == 0.5);
  // One pause after each piece: three of the big tensor (the last a half), one of the tail.
  CHECK(pauses == 4);
  CHECK(pacing::write_pace() == 0);  // per thread: this one never paced
  CHECK(pacing::paced_pauses() == pauses_here);
  REQUIRE(paced.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(paced[i].file_offset == plain[i].file_offset);
    CHECK(paced[i].nbytes == plain[i].nbytes);
    CHECK(paced[i].crc32c == plain[i].crc32c);
  }
  CHECK(paced[0].crc32c == crc32c(big.data(), big.size() * 4));
  InputFile a(dir.file("plain.safetensors")), b(dir.file("paced.safetensors"));
  REQUIRE(a.size() == b.size());
  CHECK(a.read_string(0, a.size()) == b.read_string(0, b.size()));
}

TEST_CASE("a hand-built safetensors file parses with tensors sorted by offset") {
  const std::string header =
      R"({"__metadata__":{"who":"hand"},"b":{"dtype":"I16","shape":[2],"data_offsets":[8,12]},)"
      R"( "a" : {"shape":[1,2],"data_offsets":[0,8],"dtype":"F32"},)"
      R"( "z":{"dtype":"U8","shape":[0],"data_offsets":[12,12]}})";
  const std::string bytes = file_bytes(header, std::string(12, '\x7f'));
  auto h = parse_safetensors_bytes(bytes, "hand.safetensors");
  CHECK(h.data_start == 8 + header.size());
  CHECK(h.data_size == 12);
  CHECK(h.metadata == std::map<std::string, std::string>{{"who", "hand"}});
  REQUIRE(h.tensors.size() == 3);
  CHECK(h.tensors[0].name == "a");
  CHECK(h.tensors[0].shape == std::vector<int64_t>{1, 2});
  CHECK(h.tensors[1].name == "b");
  CHECK((h.tensors[1].begin == 8 && h.tensors[1].end == 12));
  CHECK(h.tensors[2].name == "z");

  TempDir dir;
  nnx_format_test::write_bytes(dir.file("hand.safetensors"), bytes);
  auto from_file = read_safetensors_header(InputFile(dir.file("hand.safetensors")), "hand");
  CHECK(from_file.tensors.size() == 3);
  CHECK(from_file.data_start == h.data_start);
  CHECK(from_file.at("b", "hand").dtype == "I16");
}

TEST_CASE("a truncated safetensors file is an error naming the file and the missing bytes") {
  TempDir dir;
  const auto path = dir.file("cut.safetensors");
  auto read = [&](const std::string& bytes) {
    nnx_format_test::write_bytes(path, bytes);
    return read_safetensors_header(InputFile(path), path);
  };
  // Shorter than the 8-byte length.
  CHECK_THROWS_WITH(read("abcde"), Equals("[read_safetensors_header] '" + path +
                                          "' is truncated: needs bytes [0, 8) but has 5 bytes"));
  CHECK_THROWS_WITH(parse_safetensors_bytes("", "mem"),
                    Equals("[parse_safetensors_bytes] 'mem' is truncated: needs bytes [0, 8) but "
                           "has 0 bytes"));
  // The header is cut.
  const std::string header = R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})";
  const std::string whole = file_bytes(header, std::string(12, '\0'));
  CHECK_THROWS_WITH(read(whole.substr(0, 30)),
                    Contains("'" + path + "' is truncated: needs bytes [8, " +
                             std::to_string(8 + header.size()) + ") but has 30 bytes"));
  // The data section is cut: the tensor's range leaves the data section.
  CHECK_THROWS_WITH(read(whole.substr(0, whole.size() - 1)),
                    Equals("[parse_safetensors_header] tensor 't' in '" + path +
                           "': data_offsets [0, 12] are not a range inside the data section of "
                           "11 bytes"));
  CHECK_NOTHROW(read(whole));
}

TEST_CASE("a safetensors header over the size limit is rejected before it is read") {
  const std::string bytes = le64(kMaxHeaderBytes + 1) + "{}";
  CHECK_THROWS_WITH(parse_safetensors_bytes(bytes, "big.safetensors"),
                    Equals("[parse_safetensors_bytes] 'big.safetensors': header of 104857601 "
                           "bytes exceeds the limit of 104857600 bytes; the file is corrupt or "
                           "not a safetensors file"));
  CHECK_THROWS_WITH(parse_safetensors_bytes(le64(UINT64_MAX), "big.safetensors"),
                    Contains("header of 18446744073709551615 bytes exceeds the limit"));
}

TEST_CASE("a safetensors header that is not a JSON object is rejected naming the file") {
  CHECK_THROWS_WITH(parse("[1, 2]", 0),
                    Equals("[parse_safetensors_header] 'm.safetensors': the header must be a JSON "
                           "object, got an array of 2 entries"));
  CHECK_THROWS_WITH(parse(R"({"a": )", 0),
                    StartsWith("[parse_safetensors_header] 'm.safetensors': not valid JSON: "));
  CHECK_THROWS_WITH(parse("", 0), Contains("'m.safetensors': not valid JSON"));
  CHECK_THROWS_WITH(parse(std::string(100, '[') + std::string(100, ']'), 0),
                    Contains("'m.safetensors': JSON nests deeper than 64 levels"));
  CHECK_THROWS_WITH(parse(R"({"a": 3})", 0),
                    Equals("[parse_safetensors_header] tensor 'a' in 'm.safetensors': expected a "
                           "JSON object, got 3"));
}

TEST_CASE("bad safetensors entries are rejected naming the file and the tensor") {
  auto entry = [](const std::string& body) { return R"({"w.0": {)" + body + "}}"; };
  const std::string where = "tensor 'w.0' in 'm.safetensors'";
  CHECK_THROWS_WITH(parse(entry(R"("dtype":"F8","shape":[1],"data_offsets":[0,1])"), 1),
                    Contains("unknown dtype 'F8' for " + where) && Contains("known dtypes: F64"));
  CHECK_THROWS_WITH(parse(entry(R"("dtype":"F32","shape":[2,-2],"data_offsets":[0,0])"), 0),
                    Contains("shape (2, -2) of " + where + " has a negative dim -2"));
  CHECK_THROWS_WITH(parse(entry(R"("dtype":"F32","shape":[1.5],"data_offsets":[0,4])"), 4),
                    Contains(where + ": shape must hold integers below 2^63, got 1.5"));
  CHECK_THROWS_WITH(parse(entry(R"("dtype":"F32","shape":[2],"data_offsets":[8,0])"), 16),
                    Contains(where + ": data_offsets [8, 0] are not a range inside the data "
                                     "section of 16 bytes"));
  CHECK_THROWS_WITH(parse(entry(R"("dtype":"F32","shape":[2],"data_offsets":[8,16])"), 12),
                    Contains(where + ": data_offsets [8, 16] are not a range inside"));
  CHECK_THROWS_WITH(parse(entry(R"("dtype":"F32","shape":[2],"data_offsets":[-1,7])"), 12),
                    Contains(where + ": data_offsets[0] must be a non-negative integer"));
  CHECK_THROWS_WITH(parse(entry(R"("dtype":"F32","shape":[2],"data_offsets":[0])"), 12),
                    Contains(where + ": data_offsets must be an array [begin, end]"));
  CHECK_THROWS_WITH(parse(entry(R"("dtype":"F32","shape":[2,3],"data_offsets":[0,20])"), 24),
                    Equals("[parse_safetensors_header] " + where +
                           ": data_offsets [0, 20] span "
                           "20 bytes but shape (2, 3) of F32 needs 24 bytes"));
  CHECK_THROWS_WITH(parse(entry(R"("dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1)"), 8),
                    Contains(where + ": unknown key 'extra'; the known keys are dtype, shape, "
                                     "data_offsets"));
  CHECK_THROWS_WITH(parse(entry(R"("dtype":"F32","data_offsets":[0,8])"), 8),
                    Contains(where + ": missing required key 'shape'"));
  CHECK_THROWS_WITH(parse(entry(R"("dtype":4,"shape":[2],"data_offsets":[0,8])"), 8),
                    Contains(where + ": dtype must be a string, got 4"));
  CHECK_THROWS_WITH(
      parse(entry(R"("dtype":"U8","shape":[4611686018427387904,2],"data_offsets":[0,8])"), 8),
      Contains(where) && Contains("has more than 2^62 elements"));
}

TEST_CASE("overlapping safetensors tensors are rejected naming both") {
  const std::string header = R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})";
  CHECK_THROWS_WITH(parse(header, 12),
                    Equals("[parse_safetensors_header] 'm.safetensors': tensors 'a' [0, 8) and "
                           "'b' [4, 12) overlap in the data section"));
  // Touching ranges and empty tensors inside another one do not overlap.
  CHECK_NOTHROW(parse(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                      R"("b":{"dtype":"U8","shape":[0],"data_offsets":[4,4]},)"
                      R"("c":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}})",
                      12));
  // An overlap hidden behind a long earlier tensor is still found.
  CHECK_THROWS_WITH(parse(R"({"a":{"dtype":"U8","shape":[10],"data_offsets":[0,10]},)"
                          R"("b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]},)"
                          R"("c":{"dtype":"U8","shape":[2],"data_offsets":[6,8]}})",
                          10),
                    Contains("tensors 'a' [0, 10) and 'b' [2, 4) overlap"));
}

TEST_CASE("safetensors metadata must map strings to strings") {
  CHECK_THROWS_WITH(parse(R"({"__metadata__":{"step":3}})", 0),
                    Equals("[parse_safetensors_header] __metadata__ in 'm.safetensors': value of "
                           "'step' must be a string, got 3"));
  CHECK_THROWS_WITH(parse(R"({"__metadata__":["x"]})", 0),
                    Contains("__metadata__ in 'm.safetensors': must be an object of strings"));
  CHECK(parse(R"({"__metadata__":{}})", 0).metadata.empty());
}

TEST_CASE("a missing tensor is an error naming the file and suggesting close names") {
  auto h = parse(R"({"layers.0.kernel":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                 R"("layers.0.bias":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                 2);
  CHECK_THROWS_WITH(h.at("layers.0.kernal", "s.safetensors"),
                    Equals("[at] tensor 'layers.0.kernal' is not in 's.safetensors' (2 tensors); "
                           "close names: layers.0.kernel"));
  CHECK_THROWS_WITH(h.at("zzz", "s.safetensors"),
                    Equals("[at] tensor 'zzz' is not in 's.safetensors' (2 tensors)"));
}

TEST_CASE("write_safetensors rejects duplicate, reserved and mis-sized tensors naming them") {
  TempDir dir;
  const auto path = dir.file("bad.safetensors");
  const float x[2] = {1, 2};
  CHECK_THROWS_WITH(write_safetensors(path, {{"x", "F32", {2}, x, 8}, {"x", "F32", {2}, x, 8}}),
                    Equals("[SafetensorsWriter] '" + path + "': tensor 'x' is given twice"));
  CHECK_THROWS_WITH(write_safetensors(path, {{"__metadata__", "F32", {2}, x, 8}}),
                    Equals("[SafetensorsWriter] '" + path +
                           "': '__metadata__' is reserved for "
                           "metadata"));
  CHECK_THROWS_WITH(write_safetensors(path, {{"x", "F32", {3}, x, 8}}),
                    Equals("[write_safetensors] tensor 'x' for '" + path +
                           "' has 8 bytes but "
                           "shape (3) of F32 needs 12 bytes"));
  CHECK_THROWS_WITH(write_safetensors(path, {{"x", "F4", {2}, x, 8}}),
                    Contains("unknown dtype 'F4' for tensor 'x' for '" + path + "'"));
  CHECK_THROWS_WITH(write_safetensors(path, {{"x", "F32", {2}, nullptr, 8}}),
                    Contains("tensor 'x' for '" + path + "' has no data"));
  CHECK_FALSE(std::filesystem::exists(path));
}

namespace {
// Files written while it lives fail beyond `bytes` (EFBIG, as a full disk fails with ENOSPC).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &before_);
    previous_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit = before_;
    limit.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &before_);
    std::signal(SIGXFSZ, previous_handler_);
  }

 private:
  rlimit before_{};
  void (*previous_handler_)(int) = nullptr;
};
}  // namespace

TEST_CASE("a write that fails in the header or the data leaves no file behind") {
  TempDir dir;
  std::vector<unsigned char> data(4096, 7);
  // 4 bytes: the header's length field already fails; 100: the data does.
  for (rlim_t limit : {rlim_t{4}, rlim_t{100}}) {
    INFO("files limited to " << limit << " bytes");
    const std::string path = dir.file("x.safetensors");
    {
      FileSizeLimit full(limit);
      CHECK_THROWS_WITH(write_safetensors(path, {{"a", "U8", {4096}, data.data(), 4096}}),
                        Contains("could not write") && Contains("x.safetensors"));
    }
    CHECK_FALSE(std::filesystem::exists(path));
  }
}

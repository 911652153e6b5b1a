// IdxFile reads IDX records by index from plain and gzip files, converts big-endian elements,
// and names the file and the fault when a file is truncated, padded or not IDX at all.
#include <nnx/nnx.h>

#include "data_test_util.h"

#include "../catch_after_torch.h"
#include <torch/types.h>

using Catch::Matchers::Contains;
using nnx::data::IdxFile;

namespace {
std::vector<unsigned char> iota_bytes(int n) {
  std::vector<unsigned char> out;
  for (int i = 0; i < n; ++i) out.push_back(static_cast<unsigned char>(i));
  return out;
}
}  // namespace

TEST_CASE("an IDX file of bytes reads records by index, plain or gzip-compressed") {
  nnx_test::ScratchDir dir("idx");
  auto bytes = nnx_test::idx_bytes(0x08, {3, 2, 2}, iota_bytes(12));
  nnx_test::write_bytes(dir.file("a.idx"), bytes);
  nnx_test::write_gzip(dir.file("a.idx.gz"), bytes);
  for (const char* name : {"a.idx", "a.idx.gz"}) {
    IdxFile file(dir.file(name));
    CHECK(file.size() == 3);
    CHECK(file.record_shape() == std::vector<int64_t>{2, 2});
    CHECK(file.dtype() == torch::kByte);
    auto rows = file.read({2, 0});
    CHECK(rows.sizes().vec() == std::vector<int64_t>{2, 2, 2});
    CHECK(torch::equal(rows[0].flatten(), torch::arange(8, 12).to(torch::kByte)));
    CHECK(torch::equal(rows[1].flatten(), torch::arange(0, 4).to(torch::kByte)));
    CHECK(torch::equal(nnx::data::read_idx(dir.file(name)).flatten(),
                       torch::arange(12).to(torch::kByte)));
    CHECK_THROWS_WITH(file.read({3}), Contains("record 3 is out of range [0, 3)"));
  }
}

TEST_CASE("IDX int32 and float32 elements are big-endian") {
  nnx_test::ScratchDir dir("idx_wide");
  // 258 = 0x00000102 and -2 = 0xFFFFFFFE; 1.5f = 0x3FC00000.
  nnx_test::write_bytes(dir.file("i.idx"),
                        nnx_test::idx_bytes(0x0C, {2}, {0, 0, 1, 2, 0xFF, 0xFF, 0xFF, 0xFE}));
  nnx_test::write_bytes(dir.file("f.idx"), nnx_test::idx_bytes(0x0D, {1}, {0x3F, 0xC0, 0, 0}));
  CHECK(torch::equal(nnx::data::read_idx(dir.file("i.idx")), torch::tensor({258, -2}, torch::kInt)));
  CHECK(nnx::data::read_idx(dir.file("f.idx")).item<float>() == 1.5f);
}

TEST_CASE("a damaged IDX file is an error naming the file and the fault") {
  nnx_test::ScratchDir dir("idx_bad");
  auto good = nnx_test::idx_bytes(0x08, {3, 4}, iota_bytes(12));
  auto truncated = good;
  truncated.resize(good.size() - 1);
  nnx_test::write_bytes(dir.file("short.idx"), truncated);
  nnx_test::write_gzip(dir.file("short.idx.gz"), truncated);
  CHECK_THROWS_WITH(IdxFile(dir.file("short.idx")),
                    Contains("short.idx: the header promises 3 records of shape (4,)") &&
                        Contains("the file is truncated"));
  CHECK_THROWS_WITH(IdxFile(dir.file("short.idx.gz")), Contains("(decompressed); the file is truncated"));
  auto padded = good;
  padded.push_back(0);
  nnx_test::write_bytes(dir.file("long.idx"), padded);
  CHECK_THROWS_WITH(IdxFile(dir.file("long.idx")), Contains("followed by extra bytes"));
  nnx_test::write_bytes(dir.file("text.idx"), {'h', 'e', 'l', 'l', 'o', '\n'});
  CHECK_THROWS_WITH(IdxFile(dir.file("text.idx")), Contains("text.idx: not an IDX file"));
  nnx_test::write_bytes(dir.file("type.idx"), nnx_test::idx_bytes(0x07, {1}, {0}));
  CHECK_THROWS_WITH(IdxFile(dir.file("type.idx")), Contains("unknown IDX element type 0x07"));
  CHECK_THROWS_WITH(IdxFile(dir.file("missing.idx")), Contains("cannot open") && Contains("missing.idx"));
  // A gzip stream cut inside its trailer, and one cut inside the data.
  nnx_test::write_gzip(dir.file("cut.gz"), good);
  auto size = std::filesystem::file_size(dir.file("cut.gz"));
  std::filesystem::resize_file(dir.file("cut.gz"), size - 6);
  CHECK_THROWS_WITH(IdxFile(dir.file("cut.gz")), Contains("cut.gz: the gzip data is damaged"));
  std::filesystem::resize_file(dir.file("cut.gz"), size / 2);
  CHECK_THROWS_WITH(IdxFile(dir.file("cut.gz")), Contains("cut.gz: the gzip data is damaged"));
  // Dims whose product wraps around 2^64 to the header's own 16 bytes: taken for 2^31 records
  // of 8 GiB before (and a gzip one then read far past its data).
  auto wrapping = nnx_test::idx_bytes(0x08, {1u << 31, 1u << 31, 4}, {});
  nnx_test::write_bytes(dir.file("wrap.idx"), wrapping);
  nnx_test::write_gzip(dir.file("wrap.idx.gz"), wrapping);
  for (const char* name : {"wrap.idx", "wrap.idx.gz"})
    CHECK_THROWS_WITH(IdxFile(dir.file(name)),
                      Contains(std::string(name) + ": the header promises records of shape "
                               "(2147483648, 4) times 2147483648, more than 2^63 bytes in all; "
                               "the file is corrupt"));
}

TEST_CASE("Fashion-MNIST from Debian's dataset-fashion-mnist reads as 60000 balanced images") {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  if (!std::filesystem::exists(dir + "train-labels-idx1-ubyte.gz")) {
    WARN("dataset-fashion-mnist is not installed (tools/install-deps.sh installs it); skipped");
    return;
  }
  IdxFile images(dir + "train-images-idx3-ubyte.gz");
  CHECK(images.dims() == std::vector<int64_t>{60000, 28, 28});
  auto labels = nnx::data::read_idx(dir + "train-labels-idx1-ubyte.gz");
  CHECK(labels.sizes().vec() == std::vector<int64_t>{60000});
  CHECK(labels[0].item<int>() == 9);  // the first training image is an ankle boot
  CHECK(torch::equal(torch::bincount(labels.to(torch::kLong)), torch::full({10}, 6000, torch::kLong)));
  CHECK(images.read({0}).max().item<int>() == 255);
}

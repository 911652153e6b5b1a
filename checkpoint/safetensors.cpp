// Safetensors header parsing with every size checked against the file, and the writer.
#include <nnx/checkpoint/crc32c.h>
#include <nnx/checkpoint/dtype.h>
#include <nnx/checkpoint/detail/little_endian.h>
#include <nnx/checkpoint/detail/parse_util.h>
#include <nnx/checkpoint/detail/write_pace.h>
#include <nnx/checkpoint/safetensors.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

namespace nnx::checkpoint {
namespace {

using detail::Json;
using detail::Where;
using detail::load_le64;
using detail::store_le64;

// Checks header length n against the limit and a file of file_size bytes; returns the size of
// the data section.
uint64_t check_header_length(uint64_t n, uint64_t file_size, std::string_view file,
                             const char* who) {
  if (n > kMaxHeaderBytes)
    nnx::detail::throw_error(
        who, fmt::format("'{}': header of {} bytes exceeds the limit of {} bytes; the file is "
                         "corrupt or not a safetensors file",
                         file, n, kMaxHeaderBytes));
  detail::check_file_range(8, n, file_size, file, who);
  return file_size - 8 - n;
}

TensorEntry parse_entry(const std::string& name, const Json& value, uint64_t data_size,
                        const Where& where) {
  detail::check_keys(value, {"dtype", "shape", "data_offsets"}, where);
  TensorEntry t;
  t.name = name;
  t.dtype = detail::get_string(detail::field(value, "dtype", where), "dtype", where);
  t.shape = detail::get_int_list(detail::field(value, "shape", where), "shape", kMaxRank, where);
  uint64_t nbytes = checked_nbytes(t.shape, t.dtype, where.describe());
  const Json& offsets = detail::field(value, "data_offsets", where);
  where.check(offsets.is_array() && offsets.size() == 2,
              "data_offsets must be an array [begin, end], got {}", detail::excerpt(offsets));
  t.begin = detail::get_uint(offsets[0], "data_offsets[0]", where);
  t.end = detail::get_uint(offsets[1], "data_offsets[1]", where);
  where.check(t.begin <= t.end && t.end <= data_size,
              "data_offsets [{}, {}] are not a range inside the data section of {} bytes", t.begin,
              t.end, data_size);
  where.check(t.end - t.begin == nbytes,
              "data_offsets [{}, {}] span {} bytes but shape ({}) of {} needs {} bytes", t.begin,
              t.end, t.end - t.begin, fmt::join(t.shape, ", "), t.dtype, nbytes);
  return t;
}

}  // namespace

const TensorEntry* SafetensorsHeader::find(std::string_view name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const TensorEntry& SafetensorsHeader::at(std::string_view name, std::string_view file) const {
  if (const TensorEntry* t = find(name)) return *t;
  std::vector<std::string_view> names;
  for (const auto& t : tensors) names.push_back(t.name);
  auto close = detail::close_names(names, name);
  NNX_FAIL("tensor '{}' is not in '{}' ({} tensors){}", detail::shorten(name), file, tensors.size(),
           close.empty() ? "" : fmt::format("; close names: {}", fmt::join(close, ", ")));
}

SafetensorsHeader parse_safetensors_header(std::string_view json_text, uint64_t data_size,
                                           std::string_view file) {
  const Where where{__func__, file, ""};
  Json j = detail::parse_json(json_text, where);
  where.check(j.is_object(), "the header must be a JSON object, got {}", detail::excerpt(j));
  SafetensorsHeader h;
  h.data_start = 8 + json_text.size();
  h.data_size = data_size;
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    if (key == "__metadata__") {
      const Where at = where.at("__metadata__");
      at.check(item.value().is_object(), "must be an object of strings, got {}",
               detail::excerpt(item.value()));
      for (const auto& m : item.value().items())
        h.metadata[m.key()] = detail::get_string(
            m.value(), fmt::format("value of '{}'", detail::shorten(m.key())), at);
    } else {
      const Where at = where.at(fmt::format("tensor '{}'", detail::shorten(key)));
      h.tensors.push_back(parse_entry(key, item.value(), data_size, at));
    }
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  const TensorEntry* last = nullptr;  // the non-empty tensor ending furthest so far
  for (const auto& t : h.tensors) {
    if (t.begin == t.end) continue;
    if (last != nullptr && last->end > t.begin)
      where.fail(fmt::format("tensors '{}' [{}, {}) and '{}' [{}, {}) overlap in the data section",
                             detail::shorten(last->name), last->begin, last->end,
                             detail::shorten(t.name), t.begin, t.end));
    last = &t;
  }
  return h;
}

SafetensorsHeader parse_safetensors_bytes(std::string_view file_bytes, std::string_view label) {
  detail::check_file_range(0, 8, file_bytes.size(), label, __func__);
  uint64_t n = load_le64(reinterpret_cast<const unsigned char*>(file_bytes.data()));
  uint64_t data_size = check_header_length(n, file_bytes.size(), label, __func__);
  return parse_safetensors_header(file_bytes.substr(8, n), data_size, label);
}

SafetensorsHeader read_safetensors_header(const InputFile& file, std::string_view label) {
  detail::check_file_range(0, 8, file.size(), label, __func__);
  unsigned char prefix[8];
  file.read_at(0, prefix, 8);
  uint64_t n = load_le64(prefix);
  uint64_t data_size = check_header_length(n, file.size(), label, __func__);
  return parse_safetensors_header(file.read_string(8, n), data_size, label);
}

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<TensorLayout> tensors,
                                     const std::map<std::string, std::string>& metadata)
    : path_(std::move(path)), tensors_(std::move(tensors)) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    NNX_CHECK(t.name != "__metadata__", "'{}': '__metadata__' is reserved for metadata", path_);
    NNX_CHECK(names.insert(t.name).second, "'{}': tensor '{}' is given twice", path_, t.name);
    uint64_t nbytes = checked_nbytes(t.shape, t.dtype, fmt::format("tensor '{}' for '{}'", t.name, path_));
    NNX_CHECK(offset + nbytes <= uint64_t{kMaxElements}, "'{}': the tensors hold over 2^62 bytes",
              path_);
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + nbytes}}};
    nbytes_.push_back(nbytes);
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    NNX_FAIL("'{}': the header cannot be written as JSON (names and metadata must be UTF-8): {}",
             path_, e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  NNX_CHECK(text.size() <= kMaxHeaderBytes,
            "'{}': header of {} bytes exceeds the limit of {} bytes; write fewer tensors per file",
            path_, text.size(), kMaxHeaderBytes);
  out_ = std::make_unique<OutputFile>(path_);
  try {
    unsigned char prefix[8];
    store_le64(text.size(), prefix);
    out_->write(prefix, 8);
    out_->write(text.data(), text.size());
  } catch (...) {  // the destructor does not run for a half-built writer: no file is left behind
    out_.reset();
    ::unlink(path_.c_str());
    throw;
  }
}

SafetensorsWriter::~SafetensorsWriter() {
  if (!finished_) {
    out_.reset();
    ::unlink(path_.c_str());
  }
}

void SafetensorsWriter::next_tensor() {
  const size_t i = written_.size();
  NNX_CHECK(i < tensors_.size(), "'{}': more bytes than the {} tensors hold", path_,
            tensors_.size());
  written_.push_back({tensors_[i].name, out_->size(), nbytes_[i], 0});
  left_ = nbytes_[i];
}

void SafetensorsWriter::write(const void* data, uint64_t n) {
  NNX_CHECK(!finished_, "'{}' is already finished", path_);
  const auto* bytes = static_cast<const unsigned char*>(data);
  const double pace = detail::write_pace();
  while (n > 0) {
    while (left_ == 0) next_tensor();
    const uint64_t k = std::min({n, left_, pace > 0 ? detail::kPacedPieceBytes : n});
    const auto started = std::chrono::steady_clock::now();
    written_.back().crc32c = crc32c(bytes, k, written_.back().crc32c);
    out_->write(bytes, k);
    if (pace > 0) {
      std::this_thread::sleep_for((std::chrono::steady_clock::now() - started) * pace);
      detail::count_paced_pause();
    }
    bytes += k;
    n -= k;
    left_ -= k;
  }
}

std::vector<WrittenTensor> SafetensorsWriter::finish() {
  while (left_ == 0 && written_.size() < tensors_.size()) next_tensor();  // empty tensors
  NNX_CHECK(left_ == 0 && written_.size() == tensors_.size(),
            "'{}': tensor '{}' is missing {} bytes", path_, written_.back().name, left_);
  out_->sync_and_close();
  finished_ = true;
  return written_;
}

std::vector<WrittenTensor> write_safetensors(const std::string& path,
                                             const std::vector<TensorToWrite>& tensors,
                                             const std::map<std::string, std::string>& metadata) {
  std::vector<TensorLayout> layouts;
  for (const auto& t : tensors) {
    const std::string context = fmt::format("tensor '{}' for '{}'", t.name, path);
    const uint64_t nbytes = checked_nbytes(t.shape, t.dtype, context);
    NNX_CHECK(t.nbytes == nbytes, "{} has {} bytes but shape ({}) of {} needs {} bytes", context,
              t.nbytes, fmt::join(t.shape, ", "), t.dtype, nbytes);
    NNX_CHECK(t.data != nullptr || nbytes == 0, "{} has no data", context);
    layouts.push_back({t.name, t.dtype, t.shape});
  }
  SafetensorsWriter writer(path, std::move(layouts), metadata);
  for (const auto& t : tensors) writer.write(t.data, t.nbytes);
  return writer.finish();
}

}  // namespace nnx::checkpoint

// Call paths and call sites for the collective check.
#include <nnx/sharding/detail/call_stack.h>

#include <fmt/format.h>

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string_view>

namespace nnx::detail {

namespace {

std::string_view base_name(const char* path) {
  std::string_view p = path ? path : "";
  auto slash = p.rfind('/');
  return slash == std::string_view::npos ? p : p.substr(slash + 1);
}

uint64_t fnv1a(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// The nnx source tree, from this file's own path: call sites inside its library folders are
// nnx's, not the user's.
std::string_view source_root() {
  static const std::string root = [] {
    std::string here = __FILE__;
    const std::string tail = "sharding/detail/call_stack.cpp";
    return here.size() >= tail.size() && here.ends_with(tail)
               ? here.substr(0, here.size() - tail.size())
               : std::string();
  }();
  return root;
}

bool inside_library(std::string_view file) {
  const auto root = source_root();
  if (root.empty() || !file.starts_with(root)) return false;
  file.remove_prefix(root.size());
  for (std::string_view folder : {"core/", "sharding/", "framework/", "modules/", "optim/",
                                  "checkpoint/", "data/", "metrics/"})
    if (file.starts_with(folder)) return true;
  return false;
}

thread_local std::string call_site;  // empty: none recorded

// The loaded modules' address ranges, read once (and again when an address falls outside them,
// after a dlopen): dladdr per frame would search symbol tables on every collective.
struct ModuleRange {
  uintptr_t begin, end, load_bias;
  uint64_t name_hash;
};

std::vector<ModuleRange> read_modules() {
  std::vector<ModuleRange> out;
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto& ranges = *static_cast<std::vector<ModuleRange>*>(data);
        const uint64_t name = fnv1a(base_name(info->dlpi_name));
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const auto& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD) continue;
          const uintptr_t begin = info->dlpi_addr + ph.p_vaddr;
          ranges.push_back({begin, begin + ph.p_memsz, info->dlpi_addr, name});
        }
        return 0;
      },
      &out);
  return out;
}

// The frame's key: its module's name and its offset there; the raw address when unknown.
uint64_t frame_key(void* frame) {
  static std::mutex mutex;
  static std::vector<ModuleRange> modules;
  const auto address = reinterpret_cast<uintptr_t>(frame);
  std::lock_guard<std::mutex> lock(mutex);
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (const auto& m : modules)
      if (address >= m.begin && address < m.end) return m.name_hash ^ (address - m.load_bias);
    if (attempt == 0) modules = read_modules();
  }
  return address;
}

}  // namespace

CallStack capture_call_stack() {
  if (const char* origin = current_collective_origin(); origin != nullptr)
    return {{fnv1a(origin)}, {nullptr}, origin};
  std::array<void*, CallStack::kMaxFrames> frames{};
  const int n = ::backtrace(frames.data(), static_cast<int>(frames.size()));
  CallStack out;
  for (int i = 0; i < n; ++i) {
    out.keys.push_back(frame_key(frames[i]));
    out.addresses.push_back(frames[i]);
  }
  return out;
}

uint64_t hash_of(const CallStack& stack) {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (uint64_t k : stack.keys) h = (h ^ k) * 0x100000001b3ull + (h >> 29);
  return h;
}

std::string describe_frame(void* return_address) {
  // The call instruction lies just before the return address.
  void* inside_call = static_cast<char*>(return_address) - 1;
  Dl_info info{};
  if (::dladdr(inside_call, &info) == 0 || info.dli_fbase == nullptr)
    return fmt::format("{}", return_address);
  const auto module_offset = reinterpret_cast<uintptr_t>(inside_call) -
                             reinterpret_cast<uintptr_t>(info.dli_fbase);
  std::string where = fmt::format("{}+{:#x}", base_name(info.dli_fname), module_offset);
  if (info.dli_sname == nullptr) return where;
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(
      abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status), std::free);
  const auto symbol_offset = reinterpret_cast<uintptr_t>(inside_call) -
                             reinterpret_cast<uintptr_t>(info.dli_saddr);
  return fmt::format("{}+{:#x} ({})", status == 0 && name ? name.get() : info.dli_sname,
                     symbol_offset, where);
}

int first_divergent_frame(const CallStack& mine, const std::vector<std::vector<uint64_t>>& all) {
  const size_t n = mine.keys.size();
  // Counted from the outermost frame: the first depth where some rank's path differs.
  for (size_t depth = 0; depth < n; ++depth) {
    const uint64_t key = mine.keys[n - 1 - depth];
    for (const auto& other : all)
      if (other.size() <= depth || other[other.size() - 1 - depth] != key)
        return static_cast<int>(n - 1 - depth);
  }
  return -1;  // ours is a prefix of every other path (or equal): no frame of ours differs
}

CallSiteScope::CallSiteScope(const std::source_location& where) {
  if (!call_site.empty() || inside_library(where.file_name())) return;
  std::string_view file = where.file_name();
  if (const auto root = source_root(); !root.empty() && file.starts_with(root))
    file.remove_prefix(root.size());
  call_site = fmt::format("{}:{}", file, where.line());
  set_ = true;
}

CallSiteScope::~CallSiteScope() {
  if (set_) call_site.clear();
}

std::string current_call_site() { return call_site; }

}  // namespace nnx::detail

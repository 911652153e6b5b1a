// Rngs streams: keys as RngKey variables, counters as RngCount variables.
#include <nnx/core/error.h>
#include <nnx/framework/rngs.h>

#include <torch/types.h>

namespace nnx {

namespace {
at::Tensor key_tensor(const random::Key& key) {
  auto words = random::key_data(key);
  return torch::tensor({static_cast<int64_t>(words[0]), static_cast<int64_t>(words[1])},
                       torch::kLong);
}
}  // namespace

RngStream::RngStream(random::Key key_value, std::string tag) : tag_(std::move(tag)) {
  // Keys stay concrete inside eval_shape: building an abstract model still draws keys.
  detail::AbstractInitScope concrete(false);
  key = RngKey(key_tensor(key_value));
  count = RngCount(torch::zeros({}, torch::kLong));
}

random::Key RngStream::base_key() const {
  NNX_CHECK(!key.value().is_abstract(), "stream '{}' has no key value (built inside eval_shape)",
            tag_);
  auto t = key.tensor();
  NNX_CHECK(t.numel() == 2, "stream '{}' holds a key of shape {}; expected (2,)", tag_,
            to_string(t.sizes().vec()));
  return random::wrap_key_data({static_cast<uint32_t>(t[0].item<int64_t>()),
                                static_cast<uint32_t>(t[1].item<int64_t>())});
}

uint32_t RngStream::counter() const {
  NNX_CHECK(!count.value().is_abstract(),
            "stream '{}' has no count value (built inside eval_shape)", tag_);
  return static_cast<uint32_t>(count.tensor().item<int64_t>());
}

random::Key RngStream::operator()() {
  uint32_t n = counter();
  auto next = random::fold_in(base_key(), n);
  count.set_value(count.value().with_local(torch::full({}, static_cast<int64_t>(n) + 1, torch::kLong)));
  return next;
}

RngStream RngStream::fork() { return RngStream((*this)(), tag_); }

Rngs::Rngs(int64_t default_seed, const std::map<std::string, int64_t>& streams) : Rngs(streams) {
  NNX_CHECK(!streams.count("default"),
            "the default stream is given twice (seed argument and 'default' entry)");
  streams_.emplace("default", RngStream(random::key(default_seed), "default"));
}

Rngs::Rngs(const std::map<std::string, int64_t>& streams) {
  for (const auto& [name, seed] : streams) streams_.emplace(name, RngStream(random::key(seed), name));
}

Rngs::Rngs(const std::map<std::string, random::Key>& streams) {
  for (const auto& [name, key] : streams) streams_.emplace(name, RngStream(key, name));
}

RngStream& Rngs::stream(const std::string& name) {
  auto it = streams_.find(name);
  if (it == streams_.end()) it = streams_.find("default");
  NNX_CHECK(it != streams_.end(),
            "no RngStream named '{}' and no 'default' stream; streams: ({}). Give the stream "
            "a seed, e.g. nnx::Rngs(0, {{{{\"{}\", 1}}}})",
            name, fmt::join(stream_names(), ", "), name);
  return it->second;
}

std::vector<std::string> Rngs::stream_names() const {
  std::vector<std::string> names;
  for (const auto& [name, s] : streams_) names.push_back(name);
  return names;
}

Rngs Rngs::fork() {
  std::map<std::string, random::Key> keys;
  for (auto& [name, s] : streams_) keys.emplace(name, s());
  return Rngs(keys);
}

std::vector<Rngs> Rngs::split(int64_t n) {
  NNX_CHECK(n >= 1, "split needs n >= 1, got {}", n);
  std::vector<std::map<std::string, random::Key>> keys(n);
  for (auto& [name, s] : streams_) {
    auto parts = random::split(s(), n);
    for (int64_t i = 0; i < n; ++i) keys[i].emplace(name, parts[i]);
  }
  std::vector<Rngs> out;
  for (auto& k : keys) out.emplace_back(k);
  return out;
}

}  // namespace nnx

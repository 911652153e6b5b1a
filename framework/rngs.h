// nnx::Rngs: named streams of JAX keys, as flax.nnx.Rngs. Each call of a stream returns
// fold_in(key, count) and increments count; streams not given fall back to "default".
// Keys and counts are variables (RngKey, RngCount), so they live in the module's State.
#pragma once

#include <nnx/framework/module.h>
#include <nnx/core/random.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace nnx {

class RngStream : public Module {
 public:
  RngStream() = default;
  RngStream(random::Key key, std::string tag);

  random::Key operator()();   // fold_in(key, count); count += 1
  RngStream fork();           // a new stream seeded with this stream's next key
  random::Key base_key() const;
  uint32_t counter() const;
  const std::string& tag() const { return tag_; }

  RngKey NNX_FIELD(key);      // the key data [2] (int64 holding the uint32 words)
  RngCount NNX_FIELD(count);  // scalar int64

 private:
  std::string tag_;
};

class Rngs : public Module {
 public:
  // Rngs(0): a "default" stream with seed 0. Rngs(0, {{"params", 1}}): default plus params.
  explicit Rngs(int64_t default_seed, const std::map<std::string, int64_t>& streams = {});
  // Named streams only (no default): Rngs({{"params", 0}, {"dropout", 1}}).
  explicit Rngs(const std::map<std::string, int64_t>& streams);
  // Streams from keys.
  explicit Rngs(const std::map<std::string, random::Key>& streams);

  // The stream of this name, or "default" when there is none; neither is an error.
  RngStream& stream(const std::string& name);
  bool has_stream(const std::string& name) const { return streams_.count(name) > 0; }
  std::vector<std::string> stream_names() const;

  random::Key operator()() { return stream("default")(); }
  random::Key operator()(const std::string& name) { return stream(name)(); }
  random::Key params() { return stream("params")(); }
  random::Key dropout() { return stream("dropout")(); }

  // A new Rngs whose every stream is this one's fork (Flax's rngs.fork()).
  Rngs fork();
  // n new Rngs: stream s of element i has key split(s(), n)[i] (Flax's fork(split=n), unstacked).
  std::vector<Rngs> split(int64_t n);

 private:
  std::map<std::string, RngStream> streams_;
  // The streams appear directly under this module's path ("rngs.default.count").
  detail::FieldRegistration streams_field_{this, "", &streams_};
};

}  // namespace nnx

// DataLoader: global batches from named sources, as grain's DataLoader with a sharded
// IndexSampler. Every process computes the same global batch from (seed, epoch, step), reads only
// the rows its data-parallel coordinate holds, and gets them as Arrays already placed on the mesh.
//   nnx::data::DataLoader train({{"image", images}, {"label", labels}},
//                               {.global_batch = 256, .sharding = {{mesh, P("data")}}, .seed = 0});
//   while (auto batch = train.next()) step((*batch)["image"], (*batch)["label"]);
#pragma once

#include <nnx/data/sampler.h>
#include <nnx/data/source.h>
#include <nnx/framework/state.h>
#include <nnx/framework/variable.h>
#include <nnx/sharding/array.h>
#include <nnx/sharding/named_sharding.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace nnx::data {

// The kind of the loader's state variables (seed, epoch, position) in a checkpoint.
struct DataState : VariableKind<DataState> { using VariableKind::VariableKind; };

struct LoaderOptions {
  int64_t global_batch = 0;  // records per step, over all processes
  // The batch dim's layout: spec[0] names the mesh axes it is split over (the data-parallel
  // axes); the other dims stay whole. Absent: whole batches on no mesh.
  std::optional<NamedSharding> sharding;
  uint64_t seed = 0;
  bool shuffle = true;
  Remainder remainder = Remainder::drop;
  int prefetch = 2;  // batches read ahead on a background thread; 0 reads in next()
  // Applied to this process's rows before they become Arrays (on the prefetch thread): decode,
  // convert dtypes, normalize. Fields may be replaced or added.
  std::function<void(std::map<std::string, at::Tensor>& rows)> map;
};

struct Batch {
  std::map<std::string, Array> fields;
  Array mask;  // float32 [global_batch]: 1 for a record, 0 for a padding slot; laid out as fields
  int64_t epoch = 0;
  int64_t step = 0;  // within the epoch
  const Array& operator[](const std::string& name) const;
};

class DataLoader {
 public:
  using Sources = std::vector<std::pair<std::string, std::shared_ptr<const Source>>>;
  // The sources must hold the same number of records.
  DataLoader(Sources sources, LoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next batch of the current epoch. At the epoch's end it returns nullopt once and moves on
  // to the next epoch, so `while (auto b = loader.next())` runs one epoch.
  std::optional<Batch> next();

  int64_t epoch() const { return epoch_; }
  int64_t position() const { return position_; }  // batches of this epoch already returned
  int64_t steps_per_epoch() const { return sampler_.steps_per_epoch(); }
  int64_t num_records() const { return sampler_.num_records(); }
  // This process's rows of each global batch: [first, first + count).
  std::pair<int64_t, int64_t> local_rows() const { return {local_first_, local_count_}; }

  // seed, epoch and position (plus global_batch and num_records, checked on load), as int64
  // scalars: save it in a checkpoint beside the model, and a resumed run sees the same batches.
  State state() const;
  // Errors, changing nothing, if the state's batch size or record count differ from this loader's.
  void load_state(const State& state);

 private:
  struct Prefetcher;
  std::map<std::string, at::Tensor> read_local(int64_t epoch, int64_t step) const;
  Batch to_batch(std::map<std::string, at::Tensor> rows, int64_t epoch, int64_t step) const;
  void restart_prefetch();

  Sources sources_;
  LoaderOptions options_;
  GlobalBatchSampler sampler_;
  int64_t local_first_ = 0;
  int64_t local_count_ = 0;
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  std::unique_ptr<Prefetcher> prefetcher_;
};

}  // namespace nnx::data

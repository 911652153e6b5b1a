// DataLoader: the sampler picks the global batch, each process reads its rows (on a prefetch
// thread), and make_array_from_process_local_data places them on the mesh.
#include <nnx/data/loader.h>

#include <nnx/core/error.h>
#include <nnx/sharding/mesh.h>
#include <nnx/sharding/redistribute.h>

#include <ATen/ATen.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

namespace nnx::data {

const Array& Batch::operator[](const std::string& name) const {
  auto it = fields.find(name);
  if (it == fields.end()) {
    std::vector<std::string> names;
    for (const auto& [n, _] : fields) names.push_back(n);
    NNX_FAIL("the batch has no field '{}'; its fields are {}", name, fmt::join(names, ", "));
  }
  return it->second;
}

// Reads the rest of one epoch ahead, `depth` batches at most, on a thread of its own.
struct DataLoader::Prefetcher {
  struct Item {
    std::map<std::string, at::Tensor> rows;
    std::exception_ptr error;
  };

  Prefetcher(const DataLoader& loader, int64_t epoch, int64_t first_step, int depth)
      : depth_(depth) {
    thread_ = std::thread([this, &loader, epoch, first_step] {
      for (int64_t step = first_step; step < loader.steps_per_epoch(); ++step) {
        Item item;
        try {
          item.rows = loader.read_local(epoch, step);
        } catch (...) {
          item.error = std::current_exception();
        }
        std::unique_lock lock(mutex_);
        space_.wait(lock, [&] { return stop_ || static_cast<int>(queue_.size()) < depth_; });
        if (stop_) return;
        const bool failed = item.error != nullptr;
        queue_.push_back(std::move(item));
        ready_.notify_one();
        if (failed) return;
      }
    });
  }

  ~Prefetcher() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    space_.notify_all();
    thread_.join();
  }

  std::map<std::string, at::Tensor> pop() {
    std::unique_lock lock(mutex_);
    ready_.wait(lock, [&] { return !queue_.empty(); });
    Item item = std::move(queue_.front());
    queue_.pop_front();
    space_.notify_one();
    if (item.error) std::rethrow_exception(item.error);
    return std::move(item.rows);
  }

 private:
  int depth_;
  std::mutex mutex_;
  std::condition_variable ready_, space_;
  std::deque<Item> queue_;
  bool stop_ = false;
  std::thread thread_;
};

namespace {
// The first source's records, which the sampler draws from (the others are checked against it).
int64_t first_source_records(const DataLoader::Sources& sources) {
  if (sources.empty()) return 0;
  NNX_CHECK(sources.front().second != nullptr, "source '{}' is null", sources.front().first);
  return sources.front().second->size();
}
}  // namespace

DataLoader::DataLoader(Sources sources, LoaderOptions options)
    : sources_(std::move(sources)),
      options_(std::move(options)),
      sampler_(first_source_records(sources_),
               {.global_batch = options_.global_batch, .seed = options_.seed,
                .shuffle = options_.shuffle, .remainder = options_.remainder}) {
  NNX_CHECK(options_.prefetch >= 0, "prefetch must be non-negative, got {}", options_.prefetch);
  for (const auto& [name, source] : sources_) {
    NNX_CHECK(source != nullptr, "source '{}' is null", name);
    NNX_CHECK(name != "mask", "a source may not be called 'mask': that name is the batch's "
              "padding mask (Batch::mask); rename the source");
    NNX_CHECK(source->size() == sampler_.num_records(),
              "source '{}' ({}) holds {} records but '{}' ({}) holds {}; every source needs one "
              "record per example", name, source->name(), source->size(), sources_.front().first,
              sources_.front().second->name(), sampler_.num_records());
  }
  local_count_ = options_.global_batch;
  if (options_.sharding) {
    const auto& [mesh, spec] = *options_.sharding;
    NNX_CHECK(mesh && mesh->is_bound(), "LoaderOptions.sharding needs a mesh made by make_mesh");
    for (size_t d = 1; d < spec.size(); ++d)
      NNX_CHECK(spec[d].is_none(), "LoaderOptions.sharding {} splits dim {}; only the batch dim "
                "(dim 0) may be split", spec.to_string(), d);
    int64_t shards = 1;
    int64_t index = 0;  // this process's shard along dim 0, major axis first
    if (spec.size() > 0)
      for (const auto& axis : spec[0].names()) {
        shards *= mesh->axis_size(axis);
        index = index * mesh->axis_size(axis) + mesh->coordinate(axis);
      }
    NNX_CHECK(options_.global_batch % shards == 0,
              "global_batch {} is not divisible by the {} shards of the batch dim ({} on {}); "
              "choose a multiple of {}", options_.global_batch, shards, spec.to_string(),
              mesh->to_string(), shards);
    local_count_ = options_.global_batch / shards;
    local_first_ = index * local_count_;
  }
}

DataLoader::~DataLoader() = default;

std::map<std::string, at::Tensor> DataLoader::read_local(int64_t epoch, int64_t step) const {
  std::vector<int64_t> global = sampler_.batch(epoch, step);
  std::vector<int64_t> records, slots;  // the real records among this process's rows
  for (int64_t i = 0; i < local_count_; ++i) {
    int64_t r = global[local_first_ + i];
    if (r >= 0) records.push_back(r), slots.push_back(i);
  }
  std::map<std::string, at::Tensor> rows;
  const bool padded = static_cast<int64_t>(records.size()) < local_count_;
  auto slot_index = at::tensor(slots, at::kLong);
  for (const auto& [name, source] : sources_) {
    at::Tensor got = source->read(records);
    if (padded) {
      auto shape = got.sizes().vec();
      shape[0] = local_count_;
      got = at::zeros(shape, got.options()).index_copy_(0, slot_index, got);
    }
    rows[name] = got;
  }
  rows["mask"] = at::zeros({local_count_}, at::kFloat).index_fill_(0, slot_index, 1.0);
  if (options_.map) {
    at::Tensor mask = rows.at("mask");
    options_.map(rows);
    rows["mask"] = mask;
  }
  return rows;
}

Batch DataLoader::to_batch(std::map<std::string, at::Tensor> rows, int64_t epoch,
                           int64_t step) const {
  Batch batch;
  batch.epoch = epoch;
  batch.step = step;
  for (auto& [name, local] : rows) {
    Array placed = options_.sharding
        ? make_array_from_process_local_data({options_.sharding->mesh,
                                              options_.sharding->spec.size() > 0
                                                  ? P(options_.sharding->spec[0]) : P()},
                                             local)
        : Array(local);
    if (name == "mask")
      batch.mask = placed;
    else
      batch.fields.emplace(name, placed);
  }
  return batch;
}

void DataLoader::restart_prefetch() {
  prefetcher_.reset();
  if (options_.prefetch > 0)
    prefetcher_ = std::make_unique<Prefetcher>(*this, epoch_, position_, options_.prefetch);
}

std::optional<Batch> DataLoader::next() {
  if (position_ >= steps_per_epoch()) {
    prefetcher_.reset();
    ++epoch_;
    position_ = 0;
    return std::nullopt;
  }
  if (options_.prefetch > 0 && !prefetcher_) restart_prefetch();
  std::optional<Batch> batch;
  try {
    auto rows = prefetcher_ ? prefetcher_->pop() : read_local(epoch_, position_);
    batch = to_batch(std::move(rows), epoch_, position_);
  } catch (...) {
    // The prefetcher stopped at the error, or has already handed over these rows: the next
    // call reads this batch again.
    prefetcher_.reset();
    throw;
  }
  ++position_;
  return batch;
}

namespace {
Variable scalar_state(int64_t value) {
  return DataState(Array(at::scalar_tensor(value, at::kLong)));
}
int64_t read_scalar(const State& state, const std::string& path) {
  NNX_CHECK(state.contains(path), "the loader state has no '{}'; was it saved by "
            "DataLoader::state()?", path);
  const Array& a = state.at(path).value();
  NNX_CHECK(a.defined() && !a.is_abstract() && a.numel() == 1,
            "the loader state's '{}' holds no value", path);
  return a.local().item<int64_t>();
}
}  // namespace

State DataLoader::state() const {
  State out;
  out.add("seed", scalar_state(static_cast<int64_t>(options_.seed)));
  out.add("epoch", scalar_state(epoch_));
  out.add("position", scalar_state(position_));
  out.add("global_batch", scalar_state(options_.global_batch));
  out.add("num_records", scalar_state(num_records()));
  out.add("shuffle", scalar_state(options_.shuffle ? 1 : 0));
  out.add("remainder", scalar_state(static_cast<int64_t>(options_.remainder)));
  return out;
}

void DataLoader::load_state(const State& state) {
  const int64_t batch = read_scalar(state, "global_batch");
  const int64_t records = read_scalar(state, "num_records");
  NNX_CHECK(batch == options_.global_batch && records == num_records(),
            "the loader state was saved by a loader of global_batch {} over {} records, but this "
            "one has global_batch {} over {}; resume with the same data and batch size", batch,
            records, options_.global_batch, num_records());
  // The order of the records and the last batch: states saved before these were kept hold
  // neither.
  if (state.contains("shuffle")) {
    const bool shuffle = read_scalar(state, "shuffle") != 0;
    NNX_CHECK(shuffle == options_.shuffle,
              "the loader state was saved by a loader with shuffle = {}, but this one has "
              "shuffle = {}; resume with the same LoaderOptions.shuffle", shuffle,
              options_.shuffle);
  }
  if (state.contains("remainder")) {
    const int64_t remainder = read_scalar(state, "remainder");
    auto name = [](int64_t r) {
      return r == static_cast<int64_t>(Remainder::drop)  ? "Remainder::drop"
             : r == static_cast<int64_t>(Remainder::pad) ? "Remainder::pad"
                                                         : "an unknown remainder";
    };
    NNX_CHECK(remainder == static_cast<int64_t>(options_.remainder),
              "the loader state was saved by a loader with remainder = {}, but this one has "
              "remainder = {}; resume with the same LoaderOptions.remainder", name(remainder),
              name(static_cast<int64_t>(options_.remainder)));
  }
  const int64_t epoch = read_scalar(state, "epoch");
  const int64_t position = read_scalar(state, "position");
  NNX_CHECK(epoch >= 0 && position >= 0 && position <= steps_per_epoch(),
            "the loader state's epoch {} / position {} is out of range ({} steps per epoch)", epoch,
            position, steps_per_epoch());
  const auto seed = static_cast<uint64_t>(read_scalar(state, "seed"));
  prefetcher_.reset();
  options_.seed = seed;
  sampler_ = GlobalBatchSampler(num_records(), {.global_batch = options_.global_batch,
                                                .seed = options_.seed,
                                                .shuffle = options_.shuffle,
                                                .remainder = options_.remainder});
  epoch_ = epoch;
  position_ = position;
}

}  // namespace nnx::data

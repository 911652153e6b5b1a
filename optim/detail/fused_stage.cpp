// The fused optimizer pass: each stage is a loop over a small block of updates held in cache,
// written so that the compiler vectorizes it, or over float16 lanes (half_lanes.h). This file is
// built with -fno-math-errno and without fused multiply-adds, so that every operation rounds as
// the transformations' tensor ops do.
#include <nnx/optim/detail/fused_stage.h>
#include <nnx/optim/detail/half_lanes.h>
#include <nnx/sharding/ops.h>

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/full.h>
#include <torch/csrc/autograd/variable.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <nnx/core/error.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cmath>
#include <initializer_list>
#include <type_traits>
#include <utility>

namespace nnx::optim::detail {

namespace {

constexpr int64_t kBlock = 2048;     // elements held in cache per stage call
constexpr int64_t kGrain = 1 << 15;  // elements per thread task

// A slot's local tensors, contiguous (made so in place if a load left one strided).
std::vector<at::Tensor> slot_tensors(State& slot) {
  std::vector<at::Tensor> out;
  for (auto& [path, v] : slot) {
    if (!v.tensor().is_contiguous()) v.set_value(v.value().with_local(v.tensor().contiguous()));
    out.push_back(v.tensor());
  }
  return out;
}

void bump_versions(std::vector<at::Tensor>& tensors) {
  for (auto& t : tensors) torch::autograd::impl::bump_version(t);
}

template <class T> T* at_offset(const at::Tensor& t, int64_t begin) {
#ifdef NNX_HALF_LANES
  if constexpr (std::is_same_v<T, Halves8>)
    return reinterpret_cast<Halves8*>(t.data_ptr<c10::Half>() + begin);
  else
#endif
    return t.data_ptr<T>() + begin;
}

// x rounded to bfloat16 (to nearest, ties to even, as LibTorch rounds) and widened back, in
// integer operations the compiler vectorizes. A NaN here has its lower 16 bits zero (it is a
// widened bfloat16's, or the CPU's default NaN), so the rounding carries nothing out of them and
// it stays itself; a value past bfloat16's largest becomes infinity.
inline float round_to_bfloat16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  return std::bit_cast<float>((bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u);
}

// x rounded to float16 (to nearest, ties to even) and widened back: the scalar form of the
// float16 lanes' rounding, for the elements of a block past its last whole lane group.
inline float round_to_float16(float x) { return static_cast<float>(c10::Half(x)); }

// Whether S stores float16 (one value, or lanes of them).
template <class S> constexpr bool is_float16() {
#ifdef NNX_HALF_LANES
  if constexpr (std::is_same_v<S, Halves8>) return true;
#endif
  return std::is_same_v<S, c10::Half>;
}

// x rounded to the storage type S and widened back, as a tensor op's result on S blocks; x
// itself where S is the type computed in (float and double blocks).
template <class S, class T> inline T rd(T x) {
  if constexpr (std::is_same_v<S, T>) return x;
  else if constexpr (std::is_same_v<S, c10::BFloat16>) return round_to_bfloat16(x);
  else {
    static_assert(is_float16<S>(), "blocks are stored as T, bfloat16 or float16");
    return round_to_float16(x);
  }
}

// A value already rounded to S (by rd), stored as S: for bfloat16 its upper half.
template <class S, class T> inline S stored(T x) {
  if constexpr (std::is_same_v<S, T>) return x;
  else if constexpr (std::is_same_v<S, c10::BFloat16>)
    return S(static_cast<uint16_t>(std::bit_cast<uint32_t>(x) >> 16), S::from_bits());
  else if constexpr (std::is_same_v<S, c10::Half>) return S(x);
#ifdef NNX_HALF_LANES
  else return to_halves(x);
#endif
}

// The scalar forms of the float16 lanes' sqrt_of and sign_of.
template <class T> inline T sqrt_of(T x) { return std::sqrt(x); }
template <class T> inline T sign_of(T x) { return static_cast<T>((x > T(0)) - (x < T(0))); }

std::atomic<int64_t> passes_run{0};

// Runs `loop`, compiled a second time for AVX2 where the CPU has it (8 floats a step rather
// than 4): the same operations, each rounded alike, so the values do not change.
#if defined(__x86_64__) && defined(__GNUC__)
bool cpu_has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
template <class Loop> __attribute__((target("avx2"))) void run_for_avx2(const Loop& loop) {
  loop();
}
template <class Loop> void vectorized(const Loop& loop) {
  if (cpu_has_avx2()) run_for_avx2(loop);
  else loop();
}
#else
template <class Loop> void vectorized(const Loop& loop) { loop(); }
#endif

#ifdef NNX_HALF_LANES
// Runs `loop` built for AVX2 and F16C, with every call in it inlined, so that the float16
// lanes' operations (half_lanes.h) are single instructions. Callers check cpu_has_avx2_f16c().
template <class Loop>
__attribute__((target("avx2,f16c"), flatten)) void run_for_f16c(const Loop& loop) {
  loop();
}
#endif

// body(type T, type S, first, count) over n float16 elements: whole groups of 8 as lanes where
// built (first and count in groups), then the rest one by one. Types go as tags: no lane value
// crosses a call.
template <class Body> void in_float16_lanes(int64_t n, const Body& body) {
  int64_t groups = 0;
#ifdef NNX_HALF_LANES
  groups = n / 8;
  if (groups > 0)
    run_for_f16c([&] {
      body(std::type_identity<Floats8>{}, std::type_identity<Halves8>{}, int64_t{0}, groups);
    });
#endif
  if (groups * 8 < n)
    body(std::type_identity<float>{}, std::type_identity<c10::Half>{}, groups * 8, n - groups * 8);
}

// The same over n elements stored as S (bfloat16 or float16): bfloat16 all at once, vectorized.
template <class S, class Body> void in_groups(int64_t n, const Body& body) {
  if constexpr (std::is_same_v<S, c10::BFloat16>)
    vectorized([&] { body(std::type_identity<float>{}, std::type_identity<S>{}, int64_t{0}, n); });
  else
    in_float16_lanes(n, body);
}

// Element or lane group `first` of `data` (float or reduced elements), read as L.
template <class L, class E> auto lanes_at(E* data, int64_t first) {
  using Out = std::conditional_t<std::is_const_v<E>, const L, L>;
  return reinterpret_cast<Out*>(data) + first;
}

// Stages written once: Derived::run<T, S>(i, begin, n, u, p) computes in T (float, double)
// on blocks stored as S (T itself, or bfloat16 or float16 computed in float; Floats8 on Halves8
// for float16 lanes, n then counting groups of 8), rounding each operation and each scalar to S,
// as JAX does for such arrays (and the transformations' tensor ops).
template <class Derived> class TypedStage : public FusedStage {
 public:
  void apply(size_t i, int64_t begin, int64_t n, float* u, const float* p) const override {
    vectorized([&] { derived().template run<float, float>(i, begin, n, u, p); });
  }
  void apply(size_t i, int64_t begin, int64_t n, double* u, const double* p) const override {
    vectorized([&] { derived().template run<double, double>(i, begin, n, u, p); });
  }
  void apply_bfloat16(size_t i, int64_t begin, int64_t n, float* u, const float* p) const override {
    vectorized([&] { derived().template run<float, c10::BFloat16>(i, begin, n, u, p); });
  }
  // Whole groups of 8 as float16 lanes, the rest one by one (the same roundings).
  void apply_float16(size_t i, int64_t begin, int64_t n, float* u, const float* p) const override {
    in_float16_lanes(n, [&](auto t, auto s, int64_t first, int64_t count) {
      using T = typename decltype(t)::type;
      constexpr int64_t width = sizeof(T) / sizeof(float);  // elements per T
      derived().template run<T, typename decltype(s)::type>(
          i, begin + first * width, count, lanes_at<T>(u, first), lanes_at<T>(p, first));
    });
  }

 private:
  const Derived& derived() const { return *static_cast<const Derived*>(this); }
};

// A stage that keeps per-parameter slots (momenta), updated in place: slot(k, i) is slot k of
// parameter i; their version counters move when the pass is done.
template <class Derived> class SlotStage : public TypedStage<Derived> {
 public:
  void finish() override {
    for (auto& slot : slots_) bump_versions(slot);
  }
  bool fits(const State& params) const override {
    for (const auto& slot : slots_) {
      if (slot.size() != params.size()) return false;
      for (size_t i = 0; i < slot.size(); ++i) {
        const at::Tensor& p = state_entry(params, i).tensor();
        if (slot[i].scalar_type() != p.scalar_type() || slot[i].numel() != p.numel() ||
            slot[i].device() != p.device())
          return false;
      }
    }
    return true;
  }

 protected:
  explicit SlotStage(std::initializer_list<State*> slots) {
    for (State* s : slots) slots_.push_back(slot_tensors(*s));
  }
  template <class T> T* slot(size_t k, size_t i, int64_t begin) const {
    return at_offset<T>(slots_[k][i], begin);
  }
  const std::vector<at::Tensor>& slot_tensors_of(size_t k) const { return slots_[k]; }

 private:
  std::vector<std::vector<at::Tensor>> slots_;
};

class ChainStage final : public FusedStage {
 public:
  explicit ChainStage(std::vector<std::shared_ptr<FusedStage>> stages) : stages_(std::move(stages)) {}
  void prepare() override { for (auto& s : stages_) s->prepare(); }
  void apply(size_t i, int64_t begin, int64_t n, float* u, const float* p) const override {
    for (const auto& s : stages_) s->apply(i, begin, n, u, p);
  }
  void apply(size_t i, int64_t begin, int64_t n, double* u, const double* p) const override {
    for (const auto& s : stages_) s->apply(i, begin, n, u, p);
  }
  void apply_bfloat16(size_t i, int64_t begin, int64_t n, float* u, const float* p) const override {
    for (const auto& s : stages_) s->apply_bfloat16(i, begin, n, u, p);
  }
  void apply_float16(size_t i, int64_t begin, int64_t n, float* u, const float* p) const override {
    for (const auto& s : stages_) s->apply_float16(i, begin, n, u, p);
  }
  void finish() override { for (auto& s : stages_) s->finish(); }
  bool fits(const State& params) const override {
    for (const auto& s : stages_)
      if (!s->fits(params)) return false;
    return true;
  }
  bool add_to(KernelPlan& plan) const override {
    for (const auto& s : stages_)
      if (!s->add_to(plan)) return false;
    return true;
  }

 private:
  std::vector<std::shared_ptr<FusedStage>> stages_;
};

void set_step_count(Variable& count, int64_t n) {
  count.set_value(Array(at::full({}, n, at::kLong)));
}
int64_t step_count(const Variable& count) { return count.tensor().item<int64_t>(); }

// Appends an operation of `kind` to `plan`: scalars(T{}) gives its scalars rounded to T.
template <class Scalars>
KernelOp& append(KernelPlan& plan, cuda::StepKind kind, const Scalars& scalars,
                 std::vector<const std::vector<at::Tensor>*> slots = {}) {
  KernelOp op;
  op.kind = kind;
  op.single = scalars(float{});
  op.wide = scalars(double{});
  for (size_t k = 0; k < op.single.size(); ++k) {  // reduced loops round every scalar
    op.bfloat16[k] = rd<c10::BFloat16>(op.single[k]);
    op.float16[k] = rd<c10::Half>(op.single[k]);
  }
  op.slots = std::move(slots);
  plan.ops.push_back(std::move(op));
  return plan.ops.back();
}
template <class T> using Scalars = std::array<T, 8>;

class ScaleStage final : public TypedStage<ScaleStage> {
 public:
  ScaleStage(double factor, Variable* count) : factor_(factor), count_(count) {}
  template <class T, class S> void run(size_t, int64_t, int64_t n, T* u, const T*) const {
    const T f = rd<S>(static_cast<T>(factor_));
    for (int64_t j = 0; j < n; ++j) u[j] = rd<S>(u[j] * f);
  }
  void finish() override { if (count_) set_step_count(*count_, step_count(*count_) + 1); }
  bool add_to(KernelPlan& plan) const override {
    append(plan, cuda::StepKind::scale,
           [&](auto zero) { return Scalars<decltype(zero)>{static_cast<decltype(zero)>(factor_)}; });
    return true;
  }

 private:
  double factor_;
  Variable* count_;
};

class TraceStage final : public SlotStage<TraceStage> {
 public:
  TraceStage(State& trace, double decay, bool nesterov)
      : SlotStage({&trace}), decay_(decay), nesterov_(nesterov) {}
  template <class T, class S> void run(size_t i, int64_t begin, int64_t n, T* u, const T*) const {
    S* t = slot<S>(0, i, begin);
    const T d = rd<S>(static_cast<T>(decay_));
    for (int64_t j = 0; j < n; ++j) {
      const T next = rd<S>(u[j] + rd<S>(d * static_cast<T>(t[j])));
      t[j] = stored<S>(next);
      u[j] = nesterov_ ? rd<S>(u[j] + rd<S>(d * next)) : next;
    }
  }
  bool add_to(KernelPlan& plan) const override {
    append(
        plan, nesterov_ ? cuda::StepKind::nesterov_trace : cuda::StepKind::trace,
        [&](auto zero) { return Scalars<decltype(zero)>{static_cast<decltype(zero)>(decay_)}; },
        {&slot_tensors_of(0)});
    return true;
  }

 private:
  double decay_;
  bool nesterov_;
};

class AdamStage final : public SlotStage<AdamStage> {
 public:
  AdamStage(State& mu, State& nu, Variable& count, double b1, double b2, double eps,
            double eps_root)
      : SlotStage({&mu, &nu}), count_(count), step_(step_count(count) + 1), b1_(b1), b2_(b2),
        eps_(eps), eps_root_(eps_root),
        single_{bias_reciprocal<float>(b1, step_), bias_reciprocal<float>(b2, step_)},
        double_{bias_reciprocal<double>(b1, step_), bias_reciprocal<double>(b2, step_)},
        corrections_{bias_correction<float>(b1, step_), bias_correction<float>(b2, step_)} {}
  template <class T, class S> void run(size_t i, int64_t begin, int64_t n, T* u, const T*) const {
    S* mu = slot<S>(0, i, begin);
    S* nu = slot<S>(1, i, begin);
    const T one_b1 = rd<S>(static_cast<T>(1 - b1_)), b1 = rd<S>(static_cast<T>(b1_));
    const T one_b2 = rd<S>(static_cast<T>(1 - b2_)), b2 = rd<S>(static_cast<T>(b2_));
    const auto& [r1, r2] = reciprocals<T>();
    const T c1 = rd<S>(static_cast<T>(corrections_.first));
    const T c2 = rd<S>(static_cast<T>(corrections_.second));
    const T h1 = rd<S>(T(1) / c1), h2 = rd<S>(T(1) / c2);  // float16 moments only
    const T eps = rd<S>(static_cast<T>(eps_)), eps_root = rd<S>(static_cast<T>(eps_root_));
    for (int64_t j = 0; j < n; ++j) {
      const T g = u[j];
      const T m = rd<S>(rd<S>(one_b1 * g) + rd<S>(b1 * static_cast<T>(mu[j])));
      const T v = rd<S>(rd<S>(one_b2 * rd<S>(g * g)) + rd<S>(b2 * static_cast<T>(nu[j])));
      mu[j] = stored<S>(m);
      nu[j] = stored<S>(v);
      // Bias-corrected: by the reciprocal in float and double, by the rounded correction in
      // bfloat16 (optax's division, whose reciprocal bfloat16 may not hold), by the float16
      // reciprocal of it in float16 (bias_correction).
      T m_hat, v_hat;
      if constexpr (std::is_same_v<S, T>) {
        m_hat = m * r1;
        v_hat = v * r2;
      } else if constexpr (is_float16<S>()) {
        m_hat = rd<S>(m * h1);
        v_hat = rd<S>(v * h2);
      } else {
        m_hat = rd<S>(m / c1);
        v_hat = rd<S>(v / c2);
      }
      const T root = rd<S>(sqrt_of(rd<S>(v_hat + eps_root)));
      u[j] = rd<S>(m_hat / rd<S>(root + eps));
    }
  }
  void finish() override {
    SlotStage::finish();
    set_step_count(count_, step_);
  }
  bool add_to(KernelPlan& plan) const override {
    append(
        plan, cuda::StepKind::adam,
        [&](auto zero) {
          using T = decltype(zero);
          const auto& [r1, r2] = reciprocals<T>();
          return Scalars<T>{static_cast<T>(1 - b1_), static_cast<T>(b1_),
                            static_cast<T>(1 - b2_), static_cast<T>(b2_),
                            r1, r2, static_cast<T>(eps_root_), static_cast<T>(eps_)};
        },
        {&slot_tensors_of(0), &slot_tensors_of(1)});
    // Reduced moments are corrected by the rounded corrections (bfloat16) or their rounded
    // reciprocals (float16), as run() corrects them.
    auto& op = plan.ops.back();
    const float c1 = corrections_.first, c2 = corrections_.second;
    op.bfloat16[4] = rd<c10::BFloat16>(c1);
    op.bfloat16[5] = rd<c10::BFloat16>(c2);
    op.float16[4] = rd<c10::Half>(1.0f / rd<c10::Half>(c1));
    op.float16[5] = rd<c10::Half>(1.0f / rd<c10::Half>(c2));
    return true;
  }

 private:
  // The bias corrections of this step, once per dtype (not per block).
  template <class T> const auto& reciprocals() const {
    if constexpr (std::is_same_v<T, double>) return double_;
    else return single_;  // float (float16 lanes do not use them)
  }

  Variable& count_;
  int64_t step_;
  double b1_, b2_, eps_, eps_root_;
  std::pair<float, float> single_;
  std::pair<double, double> double_;
  std::pair<float, float> corrections_;  // 1 - b^t, for bfloat16 and float16 moments
};

class RmsStage final : public SlotStage<RmsStage> {
 public:
  RmsStage(State& nu, double decay, double eps) : SlotStage({&nu}), decay_(decay), eps_(eps) {}
  template <class T, class S> void run(size_t i, int64_t begin, int64_t n, T* u, const T*) const {
    S* nu = slot<S>(0, i, begin);
    const T one_d = rd<S>(static_cast<T>(1 - decay_)), d = rd<S>(static_cast<T>(decay_));
    const T eps = rd<S>(static_cast<T>(eps_));
    for (int64_t j = 0; j < n; ++j) {
      const T g = u[j];
      const T v = rd<S>(rd<S>(one_d * rd<S>(g * g)) + rd<S>(d * static_cast<T>(nu[j])));
      nu[j] = stored<S>(v);
      u[j] = rd<S>(g * rd<S>(T(1) / sqrt_of(rd<S>(v + eps))));  // rsqrt: one op on S
    }
  }
  bool add_to(KernelPlan& plan) const override {
    append(
        plan, cuda::StepKind::rms,
        [&](auto zero) {
          using T = decltype(zero);
          return Scalars<T>{static_cast<T>(1 - decay_), static_cast<T>(decay_),
                            static_cast<T>(eps_)};
        },
        {&slot_tensors_of(0)});
    return true;
  }

 private:
  double decay_, eps_;
};

class LionStage final : public SlotStage<LionStage> {
 public:
  LionStage(State& mu, double b1, double b2) : SlotStage({&mu}), b1_(b1), b2_(b2) {}
  template <class T, class S> void run(size_t i, int64_t begin, int64_t n, T* u, const T*) const {
    S* mu = slot<S>(0, i, begin);
    const T one_b1 = rd<S>(static_cast<T>(1 - b1_)), b1 = rd<S>(static_cast<T>(b1_));
    const T one_b2 = rd<S>(static_cast<T>(1 - b2_)), b2 = rd<S>(static_cast<T>(b2_));
    for (int64_t j = 0; j < n; ++j) {
      const T g = u[j], m = static_cast<T>(mu[j]);
      const T mix = rd<S>(rd<S>(one_b1 * g) + rd<S>(b1 * m));
      u[j] = sign_of(mix);
      mu[j] = stored<S>(rd<S>(rd<S>(one_b2 * g) + rd<S>(b2 * m)));
    }
  }
  bool add_to(KernelPlan& plan) const override {
    append(
        plan, cuda::StepKind::lion,
        [&](auto zero) {
          using T = decltype(zero);
          return Scalars<T>{static_cast<T>(1 - b1_), static_cast<T>(b1_), static_cast<T>(1 - b2_),
                            static_cast<T>(b2_)};
        },
        {&slot_tensors_of(0)});
    return true;
  }

 private:
  double b1_, b2_;
};

class DecayStage final : public TypedStage<DecayStage> {
 public:
  DecayStage(double weight_decay, std::vector<bool> selected)
      : weight_decay_(weight_decay), selected_(std::move(selected)) {}
  template <class T, class S> void run(size_t i, int64_t, int64_t n, T* u, const T* p) const {
    if (!selected_[i]) return;
    const T wd = rd<S>(static_cast<T>(weight_decay_));
    for (int64_t j = 0; j < n; ++j) u[j] = rd<S>(u[j] + rd<S>(wd * p[j]));
  }
  bool add_to(KernelPlan& plan) const override {
    append(plan, cuda::StepKind::decay, [&](auto zero) {
      return Scalars<decltype(zero)>{static_cast<decltype(zero)>(weight_decay_)};
    }).selected = &selected_;
    return true;
  }

 private:
  double weight_decay_;
  std::vector<bool> selected_;
};

class ClipStage final : public TypedStage<ClipStage> {
 public:
  ClipStage(const State& gradients, double max_norm) : gradients_(gradients), max_norm_(max_norm) {}
  void prepare() override { norm_ = global_norm(gradients_); }
  template <class T, class S> void run(size_t, int64_t, int64_t n, T* u, const T*) const {
    if (norm_ < max_norm_) return;
    const T norm = rd<S>(static_cast<T>(norm_)), max_norm = rd<S>(static_cast<T>(max_norm_));
    for (int64_t j = 0; j < n; ++j) u[j] = rd<S>(rd<S>(u[j] / norm) * max_norm);
  }
  bool add_to(KernelPlan& plan) const override {  // after prepare: clips or is not there
    if (!plan.shape_only && norm_ < max_norm_) return true;
    append(plan, cuda::StepKind::clip, [&](auto zero) {
      using T = decltype(zero);
      return Scalars<T>{static_cast<T>(norm_), static_cast<T>(max_norm_)};
    });
    return true;
  }

 private:
  const State& gradients_;
  double max_norm_;
  double norm_ = 0;
};

template <class T>
void pass(const FusedStage& stage, size_t i, const at::Tensor& gradient, const at::Tensor& param,
          at::Tensor& target, bool add) {
  const T* g = gradient.data_ptr<T>();
  const T* p = param.data_ptr<T>();
  T* out = target.data_ptr<T>();
  at::parallel_for(0, gradient.numel(), kGrain, [&](int64_t begin, int64_t end) {
    T u[kBlock];
    for (int64_t b = begin; b < end; b += kBlock) {
      const int64_t n = std::min(kBlock, end - b);
      std::copy(g + b, g + b + n, u);
      stage.apply(i, b, n, u, p + b);
      if (add)
        vectorized([&] {
          for (int64_t j = 0; j < n; ++j) out[b + j] = out[b + j] + u[j];
        });
      else
        std::copy(u, u + n, out + b);
    }
  });
}

// Blocks stored as S (bfloat16, or float16 in lanes where float16_lanes()): each block is
// widened to float for the stages, and the sum p + u rounds to S as the tensor op's does.
template <class T, class S> void widen(const S* from, T* to, int64_t n) {
  for (int64_t j = 0; j < n; ++j) to[j] = static_cast<T>(from[j]);
}
template <class T, class S> void write_back(S* out, const T* u, int64_t n, bool add) {
  if (add)
    for (int64_t j = 0; j < n; ++j) out[j] = stored<S>(rd<S>(static_cast<T>(out[j]) + u[j]));
  else
    for (int64_t j = 0; j < n; ++j) out[j] = stored<S>(u[j]);
}

template <class S>
void pass_reduced(const FusedStage& stage, size_t i, const at::Tensor& gradient,
                  const at::Tensor& param, at::Tensor& target, bool add) {
  const S* g = gradient.data_ptr<S>();
  const S* p = param.data_ptr<S>();
  S* out = target.data_ptr<S>();
  at::parallel_for(0, gradient.numel(), kGrain, [&](int64_t begin, int64_t end) {
    alignas(32) float u[kBlock];  // whole lane groups from the start: Floats8 alignment
    alignas(32) float wide_p[kBlock];
    for (int64_t b = begin; b < end; b += kBlock) {
      const int64_t n = std::min(kBlock, end - b);
      in_groups<S>(n, [&](auto t, auto s, int64_t first, int64_t count) {
        using T = typename decltype(t)::type;
        using L = typename decltype(s)::type;
        widen(lanes_at<L>(g + b, first), lanes_at<T>(u, first), count);
        widen(lanes_at<L>(p + b, first), lanes_at<T>(wide_p, first), count);
      });
      if constexpr (std::is_same_v<S, c10::BFloat16>) stage.apply_bfloat16(i, b, n, u, wide_p);
      else stage.apply_float16(i, b, n, u, wide_p);
      in_groups<S>(n, [&](auto t, auto s, int64_t first, int64_t count) {
        using T = typename decltype(t)::type;
        using L = typename decltype(s)::type;
        write_back(lanes_at<L>(out + b, first), lanes_at<T>(u, first), count, add);
      });
    }
  });
}

}  // namespace

std::shared_ptr<FusedStage> chain_stage(std::vector<std::shared_ptr<FusedStage>> stages) {
  return std::make_shared<ChainStage>(std::move(stages));
}
std::shared_ptr<FusedStage> scale_stage(double factor, Variable* count_to_advance) {
  return std::make_shared<ScaleStage>(factor, count_to_advance);
}
std::shared_ptr<FusedStage> trace_stage(State& trace, double decay, bool nesterov) {
  return std::make_shared<TraceStage>(trace, decay, nesterov);
}
std::shared_ptr<FusedStage> adam_stage(State& mu, State& nu, Variable& count, double b1,
                                       double b2, double eps, double eps_root) {
  return std::make_shared<AdamStage>(mu, nu, count, b1, b2, eps, eps_root);
}
std::shared_ptr<FusedStage> rms_stage(State& nu, double decay, double eps) {
  return std::make_shared<RmsStage>(nu, decay, eps);
}
std::shared_ptr<FusedStage> lion_stage(State& mu, double b1, double b2) {
  return std::make_shared<LionStage>(mu, b1, b2);
}
std::shared_ptr<FusedStage> decay_stage(double weight_decay, std::vector<bool> selected) {
  return std::make_shared<DecayStage>(weight_decay, std::move(selected));
}
std::shared_ptr<FusedStage> clip_stage(const State& gradients, double max_norm) {
  return std::make_shared<ClipStage>(gradients, max_norm);
}

bool float16_lanes() {
#ifdef NNX_HALF_LANES
  return cpu_has_avx2_f16c();
#else
  return false;
#endif
}

bool fusable(const State& updates, const State& params) {
  if (updates.size() != params.size()) return false;
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& g = state_entry(updates, i).tensor();
    const at::Tensor& p = state_entry(params, i).tensor();
    const auto dtype = p.scalar_type();
    const bool takes_dtype = dtype == at::kFloat || dtype == at::kDouble ||
                             dtype == at::kBFloat16 || (dtype == at::kHalf && float16_lanes());
    if (!takes_dtype ||
        g.scalar_type() != dtype ||
        g.sizes() != p.sizes() || !p.device().is_cpu() || !g.device().is_cpu())
      return false;
  }
  return true;
}

void run_fused(const FusedStage& stage, size_t i, const at::Tensor& gradient,
               const at::Tensor& param, at::Tensor& target, bool add) {
  const at::Tensor g = gradient.contiguous(), p = param.contiguous();
  at::Tensor out = target.is_contiguous() ? target : target.contiguous();
  switch (p.scalar_type()) {
    case at::kFloat: pass<float>(stage, i, g, p, out, add); break;
    case at::kDouble: pass<double>(stage, i, g, p, out, add); break;
    case at::kBFloat16: pass_reduced<c10::BFloat16>(stage, i, g, p, out, add); break;
#ifdef NNX_HALF_LANES
    case at::kHalf:
      NNX_CHECK(float16_lanes(), "the fused pass takes float16 only on CPUs with AVX2 and F16C");
      pass_reduced<c10::Half>(stage, i, g, p, out, add);
      break;
#endif
    default: NNX_FAIL("the fused pass takes float32, float64, bfloat16 or float16, not {}",
                      c10::toString(p.scalar_type()));
  }
  ++passes_run;
  if (!out.is_same(target)) target.copy_(out);
  else torch::autograd::impl::bump_version(target);
}

int64_t fused_pass_runs() { return passes_run.load(); }

}  // namespace nnx::optim::detail

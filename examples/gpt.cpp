// A GPT-2-style decoder trained on characters of real English text (Debian's fortunes), in three
// layouts chosen by logical axis rules alone: data parallel, tensor parallel (Megatron's
// column-then-row split of attention and MLP) and both on a (data, model) mesh. It checkpoints,
// resumes exactly, and generates text from a checkpoint restored onto any other mesh.
//   mpirun -np 4 build/examples/gpt --layout dp_tp          # train
//   mpirun -np 2 build/examples/gpt --layout tp --generate 200 --prompt "The meaning of life"
#include <nnx/nnx.h>

#include "common/checkpoints.h"
#include "common/csv_log.h"
#include "common/flags.h"
#include "common/progress_bar.h"

#include <torch/torch.h>

#include <filesystem>
#include <fstream>

namespace ckpt = nnx::checkpoint;
namespace fs = std::filesystem;
using nnx::P;

struct GPTConfig {
  int64_t vocab = 256;  // bytes
  int64_t max_len = 64;
  int64_t d_model = 128;
  int64_t heads = 4;
  int64_t layers = 2;
  int64_t mlp = 512;
  at::ScalarType dtype = at::kFloat;  // compute dtype; parameters stay float32
};

// Pre-LayerNorm block: causal self-attention, then a GELU MLP, each in a residual.
struct Block : nnx::Module {
  Block(const GPTConfig& c, nnx::Rngs& rngs)
      : ln1(c.d_model, rngs, {.dtype = c.dtype, .scale_metadata = {.out_sharding = P("embed")},
                              .bias_metadata = {.out_sharding = P("embed")}}),
        attention(c.heads, c.d_model, rngs,
                  {.dtype = c.dtype,
                   .qkv_kernel_metadata = {.out_sharding = P("embed", "heads", "kv")},
                   .qkv_bias_metadata = {.out_sharding = P("heads", "kv")},
                   .out_kernel_metadata = {.out_sharding = P("heads", "kv", "embed")},
                   .out_bias_metadata = {.out_sharding = P("embed")}}),
        ln2(c.d_model, rngs, {.dtype = c.dtype, .scale_metadata = {.out_sharding = P("embed")},
                              .bias_metadata = {.out_sharding = P("embed")}}),
        mlp({c.d_model, c.mlp, c.d_model}, rngs,
            {.activation = [](const nnx::Array& x) { return nnx::gelu(x, true); },
             .dtype = c.dtype,
             .kernel_metadata = {{.out_sharding = P("embed", "mlp")},
                                 {.out_sharding = P("mlp", "embed")}},
             .bias_metadata = {{.out_sharding = P("mlp")}, {.out_sharding = P("embed")}}}) {}

  nnx::Array operator()(const nnx::Array& x) {
    nnx::Array h = x + attention(ln1(x), /*causal=*/true);
    return h + mlp(ln2(h));
  }

  nnx::LayerNorm NNX_FIELD(ln1);
  nnx::MultiHeadAttention NNX_FIELD(attention);
  nnx::LayerNorm NNX_FIELD(ln2);
  nnx::MLP NNX_FIELD(mlp);
};

struct GPT : nnx::Module {
  GPT(const GPTConfig& c, nnx::Rngs& rngs)
      : token_embed(c.vocab, c.d_model, rngs,
                    {.dtype = c.dtype, .embedding_metadata = {.out_sharding = P("vocab", "embed")}}),
        position_embed(c.max_len, c.d_model, rngs,
                       {.dtype = c.dtype, .embedding_metadata = {.out_sharding = P("seq", "embed")}}),
        ln_f(c.d_model, rngs, {.dtype = c.dtype, .scale_metadata = {.out_sharding = P("embed")},
                               .bias_metadata = {.out_sharding = P("embed")}}) {
    for (int64_t i = 0; i < c.layers; ++i) blocks.emplace_back(c, rngs);
  }

  // tokens [batch, length] -> logits [batch, length, vocab], the unembedding tied to the tokens'.
  nnx::Array operator()(const nnx::Array& tokens) {
    const int64_t length = tokens.shape()[1];
    nnx::Array positions(torch::arange(length, torch::kLong));
    nnx::Array x = token_embed(tokens) + position_embed(positions);
    for (auto& block : blocks) x = block(x);
    return nnx::astype(token_embed.attend(ln_f(x)), at::kFloat);  // the loss in float32
  }

  nnx::Embed NNX_FIELD(token_embed);
  nnx::Embed NNX_FIELD(position_embed);
  std::vector<Block> NNX_FIELD(blocks);
  nnx::LayerNorm NNX_FIELD(ln_f);
};

namespace {

examples::Flags make_flags() {
  return examples::Flags(
      "Trains a GPT-2-style character model on English text, or generates from its checkpoint.\n"
      "usage: mpirun -np N gpt [flags]",
      {{"layout", "dp", "dp (batch over all ranks), tp (heads and MLP over all ranks), dp_tp"},
       {"model-parallel", "2", "ranks on the model axis for dp_tp"},
       {"text", "/usr/share/games/fortunes/cookie", "training text (Debian's fortunes)"},
       {"out", "runs/gpt", "run directory: checkpoints/ and losses.csv"},
       {"steps", "1000", "training steps"},
       {"batch", "32", "global batch of sequences"},
       {"seq", "64", "characters per sequence"},
       {"d-model", "128", "embedding width"},
       {"heads", "4", "attention heads"},
       {"layers", "2", "decoder blocks"},
       {"lr", "0.003", "peak learning rate (AdamW, warmup then cosine decay)"},
       {"dtype", "float32", "compute dtype: float32 or bfloat16 (parameters stay float32)"},
       {"seed", "0", "parameter and shuffling seed"},
       {"resume", "false", "continue from the latest checkpoint in --out", true},
       {"stop-after-step", "0", "save a checkpoint and stop after this step (0: never)"},
       {"generate", "0", "generate this many characters from the latest checkpoint; no training"},
       {"prompt", "The ", "the text generation starts from"},
       {"temperature", "0", "0: greedy; above 0: sample from softmax(logits / temperature)"}});
}

std::shared_ptr<const nnx::Mesh> make_layout_mesh(const std::string& layout, int64_t model_ways) {
  const int64_t n = nnx::world_size();
  if (layout == "dp") return nnx::make_mesh({n, 1}, {"data", "model"});
  if (layout == "tp") return nnx::make_mesh({1, n}, {"data", "model"});
  return nnx::make_mesh({n / model_ways, model_ways}, {"data", "model"});
}

nnx::ShardingRules layout_rules(const std::string& layout) {
  const bool data = layout != "tp", model = layout != "dp";
  return nnx::ShardingRules({{"batch", data ? nnx::SpecEntry("data") : nnx::none},
                             {"heads", model ? nnx::SpecEntry("model") : nnx::none},
                             {"mlp", model ? nnx::SpecEntry("model") : nnx::none},
                             {"embed", nnx::none}, {"kv", nnx::none}, {"vocab", nnx::none},
                             {"seq", nnx::none}});
}

// Inputs are each window's first seq characters, targets the next ones.
void split_window(std::map<std::string, at::Tensor>& rows) {
  at::Tensor w = rows.at("window");
  rows["input"] = w.slice(1, 0, w.size(1) - 1).contiguous();
  rows["target"] = w.slice(1, 1, w.size(1)).contiguous();
  rows.erase("window");
}

// The next character after `context`, the same on every rank: greedy, or sampled with `key`.
int64_t next_token(GPT& model, const std::vector<int64_t>& context, int64_t max_len,
                   double temperature, const nnx::random::Key& key) {
  const int64_t start = std::max<int64_t>(0, static_cast<int64_t>(context.size()) - max_len);
  std::vector<int64_t> window(context.begin() + start, context.end());
  auto tokens = torch::tensor(window, torch::kLong).unsqueeze(0);
  at::Tensor logits = nnx::gather(model(nnx::Array(tokens)))[0][-1].to(torch::kDouble);
  if (temperature <= 0) return logits.argmax().item<int64_t>();
  at::Tensor probs = torch::softmax(logits / temperature, 0);
  const double u = nnx::random::uniform(key, {}).item<double>();  // JAX's bits: equal on every rank
  at::Tensor cdf = probs.cumsum(0);
  return std::min<int64_t>((cdf < u).sum().item<int64_t>(), probs.size(0) - 1);
}

}  // namespace

int main(int argc, char** argv) {
  const bool lead = nnx::world_rank() == 0;
  examples::Flags flags = make_flags();
  flags.parse(argc, argv, lead);
  const std::string layout = flags.str("layout");
  const int64_t model_ways = flags.integer("model-parallel", 1);
  if (layout != "dp" && layout != "tp" && layout != "dp_tp")
    flags.fail(lead, "--layout must be dp, tp or dp_tp, got '" + layout + "'");
  if (layout == "dp_tp" && nnx::world_size() % model_ways != 0)
    flags.fail(lead, fmt::format("--model-parallel {} does not divide the {} ranks", model_ways,
                                 nnx::world_size()));
  const std::string dtype = flags.str("dtype");
  if (dtype != "float32" && dtype != "bfloat16")
    flags.fail(lead, "--dtype must be float32 or bfloat16, got '" + dtype + "'");
  GPTConfig config{.max_len = flags.integer("seq", 2),
                   .d_model = flags.integer("d-model", 1),
                   .heads = flags.integer("heads", 1),
                   .layers = flags.integer("layers", 1),
                   .mlp = 4 * flags.integer("d-model", 1),
                   .dtype = dtype == "bfloat16" ? at::kBFloat16 : at::kFloat};
  const fs::path out = flags.str("out");
  // Warmup takes a tenth of the steps, at least one, and the decay at least one more.
  const int64_t steps = flags.integer("steps", 2), batch = flags.integer("batch", 1);
  const int64_t stop_after = flags.integer("stop-after-step", 0);

  auto mesh = make_layout_mesh(layout, model_ways);
  nnx::LogicalAxisRules rules(layout_rules(layout));
  nnx::MeshContext on(mesh);  // every rank computes only its blocks of the parameters
  nnx::Rngs rngs(flags.integer("seed"));
  GPT model(config, rngs);
  const bool fresh = flags.integer("generate", 0) == 0 && !flags.on("resume");
  if (fresh) examples::start_fresh(out / "checkpoints", lead);
  ckpt::CheckpointManager manager((out / "checkpoints").string(), {.max_to_keep = 2});

  if (const int64_t n = flags.integer("generate", 0); n > 0) {
    const int64_t step = examples::latest_step_or_fail(manager, "--generate",
                                                         (out / "checkpoints").string());
    // The checkpoint may come from any mesh: restore lays it out as this model's variables.
    auto restored = manager.restore(step, ckpt::combine({{"model", nnx::state(model)}}));
    nnx::update(model, ckpt::part(restored, "model"));
    model.eval();
    const std::string prompt = flags.str("prompt");
    if (prompt.empty()) flags.fail(lead, "--prompt must not be empty: generation continues it");
    std::vector<int64_t> context;  // byte ids 0-255, as the text file's tokens
    for (const char c : prompt) context.push_back(static_cast<unsigned char>(c));
    auto key = nnx::random::key(flags.integer("seed"));
    const double temperature = flags.number("temperature", 0);
    for (int64_t i = 0; i < n; ++i)
      context.push_back(next_token(model, context, config.max_len, temperature,
                                   nnx::random::fold_in(key, static_cast<uint32_t>(i))));
    std::string shown;  // bytes outside printable ASCII shown as '?'
    for (int64_t t : context) shown += (t == '\n' || (t >= 32 && t < 127)) ? char(t) : '?';
    if (lead) fmt::print("[step {} on {}]\n{}\n", step, mesh->to_string(), shown);
    return 0;
  }

  // 90% of the text trains, the rest measures validation loss.
  const int64_t seq = config.max_len;
  const std::string text = flags.str("text");
  auto whole = nnx::data::TokenFile(text, {.seq_len = seq});
  const int64_t split = whole.num_tokens() * 9 / 10;
  auto train_tokens =
      std::make_shared<nnx::data::TokenFile>(text, nnx::data::TokenFileOptions{.seq_len = seq, .end = split});
  auto val_tokens =
      std::make_shared<nnx::data::TokenFile>(text, nnx::data::TokenFileOptions{.seq_len = seq, .begin = split});
  const nnx::NamedSharding batch_layout{mesh, nnx::apply_rules(P("batch"), layout_rules(layout))};
  nnx::data::DataLoader train({{"window", train_tokens}},
                              {.global_batch = batch, .sharding = batch_layout,
                               .seed = static_cast<uint64_t>(flags.integer("seed")),
                               .map = split_window});
  nnx::data::DataLoader validation({{"window", val_tokens}},
                                   {.global_batch = batch, .sharding = batch_layout,
                                    .shuffle = false, .map = split_window});

  nnx::optim::Optimizer opt(
      model, nnx::optim::chain({nnx::optim::clip_by_global_norm(1.0),
                                nnx::optim::adamw(nnx::optim::warmup_cosine_decay_schedule(
                                    0.0, flags.positive("lr"), std::max<int64_t>(1, steps / 10),
                                    steps))}));
  auto everything = [&] {
    return ckpt::combine({{"model", nnx::state(model)}, {"opt", opt.state()},
                          {"data", train.state()}});
  };
  if (flags.on("resume")) {
    const int64_t step = examples::latest_step_or_fail(manager, "--resume",
                                                         (out / "checkpoints").string());
    auto restored = manager.restore(step, everything());
    nnx::update(model, ckpt::part(restored, "model"));
    opt.load_state(ckpt::part(restored, "opt"));
    train.load_state(ckpt::part(restored, "data"));
    if (lead) {
      examples::truncate_log(out / "losses.csv", step);  // rows past the checkpoint go
      fmt::print("resumed from step {}\n", step);
    }
  } else if (lead) {
    fs::create_directories(out);
    std::ofstream(out / "losses.csv") << "step,loss,grad_norm\n";
  }
  if (lead)
    fmt::print("GPT: {} layers, d_model {}, {} heads, {} parameters, {} compute; {} on {}; "
               "{} training windows of {} characters\n",
               config.layers, config.d_model, config.heads,
               nnx::state(model, nnx::OfType<nnx::Param>).numel(), dtype, layout,
               mesh->to_string(), train.num_records(), seq);
  std::fflush(stdout);

  std::ofstream losses;
  if (lead) losses.open(out / "losses.csv", std::ios::app);
  examples::ProgressBar bar("train", steps, batch * seq, lead, opt.step(), "characters");
  nnx::fallback_count() = 0;
  while (opt.step() < steps) {
    auto b = train.next();
    if (!b) continue;  // a new epoch
    const nnx::Array& input = (*b)["input"];
    const nnx::Array& target = (*b)["target"];
    auto [loss, grads] = nnx::value_and_grad(
        [&](GPT& m) { return nnx::cross_entropy(m(input), target); }, model);
    const double grad_norm = nnx::optim::global_norm(grads);
    opt.update(model, grads);
    const float loss_value = nnx::gather(loss).item<float>();
    if (lead) losses << fmt::format("{},{:.9g},{:.9g}\n", opt.step(), loss_value, grad_norm);
    bar.update(opt.step(), loss_value);
    if (opt.step() == stop_after) break;
  }
  const int64_t fallbacks = nnx::fallback_count();
  // A resumed run that had already reached its last step has that step saved.
  if (manager.latest_step() != opt.step()) manager.save(opt.step(), everything());
  if (opt.step() == stop_after) {
    if (lead) fmt::print("stopped after step {}; continue with --resume\n", opt.step());
    return 0;
  }

  model.eval();
  nnx::metrics::Average val_loss("loss");
  for (int i = 0; i < 8; ++i) {
    auto b = validation.next();
    if (!b) break;
    val_loss.update({{"loss", nnx::cross_entropy(model((*b)["input"]), (*b)["target"])}});
  }
  if (lead) {
    fmt::print("step {}: validation loss {:.4f} (nats per character); ops that gathered a "
               "whole array while training: {}\n", opt.step(), val_loss.compute(), fallbacks);
    fmt::print("checkpoint: {}; generate with --generate 200\n", manager.step_dir(opt.step()));
  }
  return 0;
}

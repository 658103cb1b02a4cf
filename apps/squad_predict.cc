// squad_predict --config RUN.yaml --weights CHECKPOINT --dataset DEV.json --out predictions.json:
// SQuAD v1.1 answers from a fine-tuned BERT with the question-answering head. The config's model
// and data sections say the model (model.head: question_answering) and the windows
// (data.max_seq_length, doc_stride, max_query_length, vocab); the weights are a checkpoint (file
// or folder: the newest valid one) or a safetensors file (ours or Hugging Face's
// BertForQuestionAnswering). Every window of the dataset is scored, the logits decoded as
// run_squad.py does (data/squad_features.h: n-best starts and ends, max-context windows,
// get_final_text), predictions.json written in the official format, and, when the dataset has
// answers, scored as evaluate-v1.1.py: {"exact_match": ..., "f1": ...} on the last line. Under
// mpirun each rank scores a contiguous share of the windows and rank 0 gathers the logits,
// decodes and writes (the predictions do not depend on the rank count); train.device picks the
// device (cuda: each rank its node-local GPU).
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/common/cli.h"
#include "apps/trainer/checkpoint.h"
#include "apps/trainer/run_settings.h"
#include "base/error.h"
#include "base/log.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"
#include "core/backend/cuda_runtime.h"
#include "data/squad_dataset.h"
#include "nn/model.h"

namespace {

using namespace ada;

struct Args {
  std::string config, weights, dataset, out = "predictions.json";
  std::vector<std::string> sets;
  int64_t batch = 32;
  int n_best = 20, max_answer_length = 30;
};

int predict(const Args& a) {
  Config cfg = Config::load_file(a.config);
  for (const auto& s : a.sets) cfg.set_override(s);
  const Config model_cfg = cfg.child("model"), data_cfg = cfg.child("data");
  ADA_CHECK_ARG(model_cfg.get_or<std::string>("head", "pretraining") == "question_answering",
                ConfigError)
      << model_cfg.where("head") << ": squad_predict needs BERT's question_answering head";
  auto world = comm::MpiCommunicator::world();
  const Device device = cfg.has("train")
                            ? trainer::read_device(cfg.child("train"), world->local_rank())
                            : Device::cpu();

  auto model = nn::builtin_models().get(model_cfg.get<std::string>("name"),
                                        model_cfg.where("name"))(model_cfg, 1);
  const data::Tokenizer tokenizer = data::fine_tuning_tokenizer(data_cfg, model_cfg);
  log_info("model weights from {}",
           trainer::init_weights_from(*world, *model, a.weights, "--weights",
                                      tokenizer.vocab_hash(), /*every_tensor=*/true));
  trainer::broadcast_model_state(*world, *model);  // read on rank 0 only
  model->to(device);
  model->train(false);

  const data::SquadFeatureOptions fo = data::squad_feature_options(data_cfg, model_cfg);
  const data::SquadDataset squad = data::read_squad(a.dataset);
  const std::vector<data::SquadFeature> features =
      data::make_squad_features(squad, tokenizer, fo, /*training=*/false);
  const int64_t n = static_cast<int64_t>(features.size()), L = fo.max_seq_length;
  ADA_CHECK_ARG(n > 0, IoError) << "--dataset " << a.dataset
                                << ": no question to answer (a SQuAD v1.1 dev set has 10,570)";
  // This rank's windows: [first[r], first[r + 1]), contiguous shares differing by at most one.
  const int ranks = world->size(), rank = world->rank();
  std::vector<int64_t> first(static_cast<size_t>(ranks) + 1), counts(static_cast<size_t>(ranks));
  for (int r = 0; r <= ranks; ++r) first[static_cast<size_t>(r)] = n * r / ranks;
  for (int r = 0; r < ranks; ++r)
    counts[static_cast<size_t>(r)] =
        (first[static_cast<size_t>(r) + 1] - first[static_cast<size_t>(r)]) * L;
  const int64_t lo = first[static_cast<size_t>(rank)], hi = first[static_cast<size_t>(rank) + 1];
  log_info("{}: {} windows of {} tokens{}", a.dataset, n, fo.max_seq_length,
           ranks > 1 ? fmt::format(", {} to {} on each of {} ranks", n / ranks,
                                   (n + ranks - 1) / ranks, ranks)
                     : "");

  // Every window's start and end logits, [n, L]: each rank fills its share, then all gather.
  Tensor start_logits = Tensor::zeros({n * L}, DType::f32),
         end_logits = Tensor::zeros({n * L}, DType::f32);
  NoGradGuard no_grad;
  for (int64_t at = lo; at < hi; at += a.batch) {
    const int64_t b = std::min(a.batch, hi - at);
    Tensor ids = Tensor::empty({b, L}, DType::i64), seg = Tensor::empty({b, L}, DType::i64),
           mask = Tensor::empty({b, L}, DType::i64);
    for (int64_t i = 0; i < b; ++i)
      for (int64_t j = 0; j < L; ++j) {
        const auto& f = features[static_cast<size_t>(at + i)];
        ids.data<int64_t>()[i * L + j] = f.input_ids[static_cast<size_t>(j)];
        seg.data<int64_t>()[i * L + j] = f.segment_ids[static_cast<size_t>(j)];
        mask.data<int64_t>()[i * L + j] = f.attention_mask[static_cast<size_t>(j)];
      }
    const nn::ModelOutput out = model->forward({{"input_ids", ids.to(device)},
                                                {"segment_ids", seg.to(device)},
                                                {"attention_mask", mask.to(device)}});
    const std::vector<float> s =
        out.outputs.at("start_logits").to(Device::cpu()).to_vector<float>();
    const std::vector<float> e = out.outputs.at("end_logits").to(Device::cpu()).to_vector<float>();
    std::copy(s.begin(), s.end(), start_logits.data<float>() + at * L);
    std::copy(e.begin(), e.end(), end_logits.data<float>() + at * L);
    if (((at - lo) / a.batch) % 50 == 49) log_info("scored {} of {} windows", at + b - lo, hi - lo);
  }
  world->allgather_inplace(start_logits, counts);
  world->allgather_inplace(end_logits, counts);
  if (rank != 0) return 0;
  std::vector<std::vector<float>> starts, ends;
  for (int64_t i = 0; i < n; ++i) {
    starts.emplace_back(start_logits.data<float>() + i * L,
                        start_logits.data<float>() + (i + 1) * L);
    ends.emplace_back(end_logits.data<float>() + i * L, end_logits.data<float>() + (i + 1) * L);
  }
  data::SquadDecodeOptions dec;
  dec.n_best_size = a.n_best;
  dec.max_answer_length = a.max_answer_length;
  const auto predictions = data::squad_predictions(squad, tokenizer, features, starts, ends, dec);
  data::write_squad_predictions(a.out, predictions);
  log_info("{} answers written to {}", predictions.size(), a.out);
  bool answered = false;
  for (const auto& art : squad.articles)
    for (const auto& p : art.paragraphs)
      for (const auto& q : p.qas) answered = answered || !q.answers.empty();
  if (answered) {
    const auto score = data::evaluate_squad(squad, predictions);
    std::cout << nlohmann::ordered_json{{"exact_match", score.exact_match}, {"f1", score.f1}}.dump()
              << std::endl;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  comm::MpiRuntime mpi(&argc, &argv);
  init_logging(mpi.rank(), mpi.size());
  Args a;
  CLI::App app("SQuAD v1.1 predictions (and EM/F1) from a fine-tuned BERT", "squad_predict");
  app.add_option("--config", a.config, "the fine-tuning run's YAML config")->required();
  app.add_option("--weights", a.weights, "a checkpoint file or folder, or a safetensors file")
      ->required();
  app.add_option("--dataset", a.dataset, "SQuAD v1.1 JSON (e.g. dev-v1.1.json)")->required();
  app.add_option("--out", a.out, "predictions.json to write (default predictions.json)");
  app.add_option("--set", a.sets, "override a config value (repeatable)")->take_all();
  app.add_option("--batch", a.batch, "windows per forward pass (default 32)")
      ->check(cli::integer_in(1, 1 << 20));
  app.add_option("--n-best", a.n_best, "start and end candidates per window (default 20)")
      ->check(cli::integer_in(1, 1000));
  app.add_option("--max-answer-length", a.max_answer_length,
                 "longest answer in word pieces (default 30)")
      ->check(cli::integer_in(1, 1 << 20));
  try {
    if (!cli::parse_command_line(app, argc, argv,
                                 "squad_predict --config RUN.yaml --weights CHECKPOINT --dataset "
                                 "DEV.json [--out predictions.json]"))
      return 0;
    cli::refuse_overwriting("--out", a.out, {a.dataset, a.config, a.weights});
    return predict(a);
  } catch (const std::exception& e) {
    log_error(std::string("squad_predict: ") + e.what());
    flush_log();
    // An error on one rank only would leave the others waiting in a collective.
    if (mpi.size() > 1) comm::MpiRuntime::abort(1);
    return 1;
  }
}

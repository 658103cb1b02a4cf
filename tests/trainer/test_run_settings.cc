// RunSettings: every default, and bad values refused naming the key as the user wrote it (in the
// file or by --set), the value and what to do. No MPI: a pure function of the config.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "apps/trainer/run_settings.h"
#include "base/error.h"
#include "core/cpu_isa.h"

namespace ada::trainer {
namespace {

const char kMinimal[] =
    "model: {name: lenet5}\n"
    "data: {name: synthetic}\n"
    "optimizer: {name: sgd, lr: 0.1}\n"
    "reducer: {name: average}\n"
    "train: {steps: 10}\n";

RunSettings settings(const std::string& yaml, const std::vector<std::string>& sets = {},
                     int world = 4) {
  Config c = Config::parse(yaml, "configs/run.yaml");
  for (const auto& s : sets) c.set_override(s);
  return read_run_settings(c, "configs/run.yaml", world, 0);
}

std::string error(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  try {
    settings(yaml, sets);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(RunSettings, Defaults) {
  const RunSettings s = settings(kMinimal);
  EXPECT_EQ(s.steps, 10);
  EXPECT_EQ(s.epochs, 0);
  EXPECT_EQ(s.batch, 32);
  EXPECT_EQ(s.micro, 1);
  EXPECT_EQ(s.eval_every, 0);
  EXPECT_EQ(s.max_eval_batches, 0);
  EXPECT_EQ(s.log_every, 50);
  EXPECT_EQ(s.checksum_every, 100);
  EXPECT_EQ(s.seed, 1u);
  EXPECT_EQ(s.threads, 0);
  EXPECT_TRUE(s.flush_denormals);
  EXPECT_EQ(s.clip, 0.0);
  EXPECT_FALSE(s.skip_nonfinite);
  EXPECT_TRUE(s.device.is_cpu());
  EXPECT_EQ(s.precision, Precision::fp32);
  EXPECT_EQ(s.activations, DType::f32);
  EXPECT_FALSE(s.loss_scale.has_value());
  EXPECT_EQ(s.comm, "auto");
  EXPECT_EQ(s.workers, 1);
  EXPECT_EQ(s.prefetch, 0);
  EXPECT_EQ(s.out_dir, "runs/run-np4");  // the config file's stem and the world
  EXPECT_EQ(s.ckpt_dir, "runs/run-np4/checkpoints");
  EXPECT_EQ(s.ckpt_every, 0);
  EXPECT_EQ(s.ckpt_keep, 3);
  EXPECT_FALSE(s.ckpt_overwrite);
  EXPECT_EQ(s.buckets.bucket_bytes, 25 << 20);
  EXPECT_EQ(s.buckets.first_bucket_bytes, 1 << 20);
  EXPECT_EQ(settings(kMinimal, {}, 16).out_dir, "runs/run-np16");
}

TEST(RunSettings, ReadsEveryKey) {
  const RunSettings s = settings(kMinimal, {"train.steps=0",
                                            "train.epochs=3",
                                            "train.batch_per_rank=8",
                                            "train.micro_batches=2",
                                            "train.eval_every=100",
                                            "train.max_eval_batches=5",
                                            "train.log_every=10",
                                            "train.checksum_every=0",
                                            "train.seed=7",
                                            "train.threads=2",
                                            "train.flush_denormals=false",
                                            "train.clip_grad_norm=1.5",
                                            "train.on_nonfinite=skip",
                                            "train.loss_scale=dynamic",
                                            "train.loss_scale_init=1024",
                                            "train.loss_scale_growth_interval=50",
                                            "train.comm=mpi",
                                            "data.workers=0",
                                            "data.prefetch=4",
                                            "output.dir=out",
                                            "checkpoint.every=20",
                                            "checkpoint.keep=1",
                                            "checkpoint.overwrite=true",
                                            "reducer.bucket_mb=0.5",
                                            "reducer.first_bucket_mb=0.25",
                                            "train.timeline=t.json",
                                            "train.init_from=ck",
                                            "train.freeze=[embeddings, encoder]"});
  EXPECT_EQ(s.epochs, 3);
  EXPECT_EQ(s.steps, 0);
  EXPECT_EQ(s.batch, 8);
  EXPECT_EQ(s.micro, 2);
  EXPECT_EQ(s.eval_every, 100);
  EXPECT_EQ(s.max_eval_batches, 5);
  EXPECT_EQ(s.log_every, 10);
  EXPECT_EQ(s.checksum_every, 0);
  EXPECT_EQ(s.seed, 7u);
  EXPECT_EQ(s.threads, 2);
  EXPECT_FALSE(s.flush_denormals);
  EXPECT_EQ(s.clip, 1.5);
  EXPECT_TRUE(s.skip_nonfinite);
  ASSERT_TRUE(s.loss_scale.has_value());
  EXPECT_TRUE(s.loss_scale->dynamic);
  EXPECT_EQ(s.loss_scale->init, 1024.0);
  EXPECT_EQ(s.loss_scale->growth_interval, 50);
  EXPECT_EQ(s.comm, "mpi");
  EXPECT_EQ(s.workers, 0);
  EXPECT_EQ(s.prefetch, 4);
  EXPECT_EQ(s.out_dir, "out");
  EXPECT_EQ(s.ckpt_dir, "out/checkpoints");
  EXPECT_EQ(s.ckpt_every, 20);
  EXPECT_EQ(s.ckpt_keep, 1);
  EXPECT_TRUE(s.ckpt_overwrite);
  EXPECT_EQ(s.buckets.bucket_bytes, 1 << 19);
  EXPECT_EQ(s.buckets.first_bucket_bytes, 1 << 18);
  EXPECT_EQ(s.timeline, "t.json");
  EXPECT_EQ(s.init_from, "ck");
  EXPECT_EQ(s.freeze, (std::vector<std::string>{"embeddings", "encoder"}));
  const RunSettings st = settings(kMinimal, {"train.loss_scale=128"});
  ASSERT_TRUE(st.loss_scale.has_value());
  EXPECT_FALSE(st.loss_scale->dynamic);
  EXPECT_EQ(st.loss_scale->init, 128.0);
}

// train.examples_per_step: the step's examples on all ranks together, whatever their number; the
// micro-batches follow from it, and a number the ranks cannot make in whole micro-batches is
// refused with the nearest ones they can.
TEST(RunSettings, ExamplesPerStepDerivesTheMicroBatchesFromTheRanks) {
  const std::vector<std::string> sets = {"train.batch_per_rank=8", "train.examples_per_step=64"};
  for (const auto& [world, micro] : {std::pair{1, 8}, {2, 4}, {4, 2}, {8, 1}}) {
    const RunSettings s = settings(kMinimal, sets, world);
    EXPECT_EQ(s.examples_per_step, 64) << world;
    EXPECT_EQ(s.micro, micro) << world;
    EXPECT_EQ(s.batch, 8) << world;
  }
  EXPECT_EQ(settings(kMinimal, {"train.examples_per_step=0", "train.micro_batches=3"}).micro, 3);
  EXPECT_EQ(settings(kMinimal, {"train.examples_per_step=0"}).examples_per_step, 0);
  const auto message = [&](const std::vector<std::string>& sets, int world) {
    try {
      settings(kMinimal, sets, world);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(message(sets, 3),
            "config configs/run.yaml: train.examples_per_step (set by --set "
            "train.examples_per_step=64) is 64, which 3 ranks x train.batch_per_rank 8 (24 "
            "examples a micro-batch) cannot make in whole micro-batches: the nearest they can "
            "make are 48 and 72");
  EXPECT_EQ(message({"train.examples_per_step=64"}, 4),
            "config configs/run.yaml: train.examples_per_step (set by --set "
            "train.examples_per_step=64) is 64, which 4 ranks x train.batch_per_rank 32 (128 "
            "examples a micro-batch) cannot make in whole micro-batches: the smallest they can "
            "make is 128; or keep 64 with train.batch_per_rank: 16 (1 micro-batch a step)");
  EXPECT_EQ(settings(kMinimal, {"train.batch_per_rank=8", "train.examples_per_step=96"}, 4).micro,
            3);
  EXPECT_NE(message({"train.batch_per_rank=8", "train.examples_per_step=100"}, 4)
                .find("cannot make in whole micro-batches: the nearest they can make are 96 and "
                      "128; or keep 100 with train.batch_per_rank: 5 (5 micro-batches a step)"),
            std::string::npos);
  const std::string both = message({"train.examples_per_step=64", "train.micro_batches=2"}, 4);
  EXPECT_NE(both.find("train.examples_per_step (set by --set train.examples_per_step=64) is 64 "
                      "and train.micro_batches (set by --set train.micro_batches=2) is 2: set one "
                      "of them"),
            std::string::npos)
      << both;
  EXPECT_NE(both.find("--set train.micro_batches=null keeps examples_per_step, --set "
                      "train.examples_per_step=0 keeps micro_batches"),
            std::string::npos)
      << both;
  EXPECT_NE(message({"train.examples_per_step=-64"}, 4)
                .find("train.examples_per_step (set by --set train.examples_per_step=-64): must "
                      "be >= 0, got -64"),
            std::string::npos);
}

// train.activations: 16bit takes the 16-bit type of train.precision (bf16 on the CPU, where
// bf16 needs AVX512_BF16: elsewhere the precision is refused first).
TEST(RunSettings, SixteenBitActivationsFollowThePrecision) {
  if (!cpu::bf16_available()) {
    EXPECT_NE(error(kMinimal, {"train.precision=bf16", "train.activations=16bit"})
                  .find("train.precision"),
              std::string::npos);
    return;
  }
  EXPECT_EQ(settings(kMinimal, {"train.precision=bf16", "train.activations=16bit"}).activations,
            DType::bf16);
  EXPECT_EQ(settings(kMinimal, {"train.precision=bf16"}).activations, DType::f32);
}

// Each message names the key as written with its location, the value and the fix or range.
TEST(RunSettings, BadValuesNameTheKeyTheValueAndTheFix) {
  struct Case {
    std::vector<std::string> sets;
    std::vector<std::string> expect;
  } cases[] = {
      {{"train.epochs=2"},
       {"config configs/run.yaml: train.epochs (set by --set train.epochs=2) is 2 and train.steps "
        "(",
        ") is ", "exactly one of train.epochs or train.steps", "--set train.epochs=0"}},
      {{"train.steps=0"},
       {"train.epochs (not set) and train.steps (set by --set train.steps=0) is 0",
        "exactly one of train.epochs or train.steps to a positive number"}},
      {{"reducer.bucket_mb=-25"},
       {"reducer.bucket_mb (set by --set reducer.bucket_mb=-25): must be from 1 byte to 1 TiB, a "
        "number of MiB in [9.5367431640625e-07, 1048576] (1/1048576 MiB is a byte), got -25; MiB "
        "per gradient bucket"}},
      // Beyond int64 or under a byte once in bytes: refused before the conversion.
      {{"reducer.bucket_mb=inf"},
       {"reducer.bucket_mb (set by --set reducer.bucket_mb=inf): must "
        "be from 1 byte to 1 TiB",
        "got inf"}},
      {{"reducer.bucket_mb=1e13"}, {"reducer.bucket_mb", "1 TiB", "got 1e+13"}},
      {{"reducer.bucket_mb=1048576.5"}, {"reducer.bucket_mb", "got 1048576.5"}},
      {{"reducer.first_bucket_mb=1e-9"},
       {"reducer.first_bucket_mb (set by --set reducer.first_bucket_mb=1e-9): must be from 1 "
        "byte",
        "got 1e-09; MiB of the first, small bucket"}},
      {{"reducer.first_bucket_mb=nan"}, {"reducer.first_bucket_mb", "got nan"}},
      {{"train.micro_batches=0"}, {"train.micro_batches", "must be > 0, got 0"}},
      {{"train.eval_every=-1"}, {"train.eval_every", "must be >= 0, got -1", "epoch's end"}},
      {{"train.log_every=0"}, {"train.log_every", "must be >= 1, got 0"}},
      {{"train.seed=-1"}, {"train.seed (set by --set train.seed=-1): must be >= 0, got -1"}},
      {{"train.threads=-2"}, {"train.threads", "must be >= 0, got -2"}},
      {{"train.flush_denormals=maybe"}, {"train.flush_denormals", "maybe"}},
      {{"train.clip_grad_norm=-1"}, {"train.clip_grad_norm", "must be >= 0, got -1"}},
      {{"data.workers=-1"}, {"data.workers", "must be in [0, 1024], got -1"}},
      {{"data.workers=5000"},
       {"data.workers", "must be in [0, 1024], got 5000", "threads per rank"}},
      {{"checkpoint.keep=0"}, {"checkpoint.keep", "must be >= 1, got 0"}},
      {{"checkpoint.every=-5"}, {"checkpoint.every", "must be >= 0, got -5"}},
      {{"train.on_nonfinite=ignore"}, {"train.on_nonfinite", "'stop' or 'skip'", "'ignore'"}},
      {{"train.precision=fp16"}, {"train.precision", "fp16 is not supported on the CPU"}},
      {{"train.precision=fp8"}, {"train.precision", "unknown precision 'fp8'"}},
      {{"train.activations=bf16"},
       {"train.activations", "unknown value 'bf16'", "known: fp32, 16bit"}},
      {{"train.activations=16bit"},
       {"train.activations", "but train.precision is fp32", "set precision: bf16"}},
      {{"train.device=gpu"}, {"train.device", "unknown device 'gpu'"}},
      {{"train.cuda_graphs=true"},
       {"train.cuda_graphs (set by --set train.cuda_graphs=true): CUDA graphs need train.device: "
        "cuda"}},
      {{"train.cuda_graphs=maybe"}, {"train.cuda_graphs", "maybe"}},
      {{"train.cuda_graphs=true", "model.head=question_answering"},
       {"train.cuda_graphs (set by --set train.cuda_graphs=true): the question_answering head "
        "(model.head) reads each batch's labels on the host"}},
      {{"train.comm=gloo"}, {"train.comm", "unknown communicator 'gloo'"}},
      {{"train.comm=nccl"}, {"train.comm", "nccl reduces CUDA device buffers"}},
      {{"train.loss_scale=huge"},
       {"train.loss_scale", "none, dynamic or a positive number", "'huge'"}},
      {{"train.loss_scale_init=64"}, {"train.loss_scale_init", "set loss_scale: dynamic"}},
      {{"train.loss_scale=dynamic", "train.loss_scale_init=0.5"},
       {"train.loss_scale_init", "must be in [1, ", "got 0.5"}},
  };
  for (const auto& c : cases) {
    const std::string msg = error(kMinimal, c.sets);
    for (const auto& part : c.expect)
      EXPECT_NE(msg.find(part), std::string::npos)
          << c.sets[0] << ": " << msg << "\nlacks: " << part;
  }
  // Non-finite numbers: refused naming the key, but train.comm_timeout_s: inf is no limit.
  EXPECT_NE(error(kMinimal, {"train.clip_grad_norm=inf"})
                .find("train.clip_grad_norm (set by --set train.clip_grad_norm=inf): must be a "
                      "finite number >= 0, got inf"),
            std::string::npos);
  EXPECT_NE(error(kMinimal, {"train.stop_at={metric: eval_top1, above: nan}"})
                .find("train.stop_at.above (set by --set train.stop_at={metric: eval_top1, "
                      "above: nan}): must be a finite number, got nan"),
            std::string::npos);
  EXPECT_NE(error(kMinimal, {"train.comm_timeout_s=-inf"})
                .find("train.comm_timeout_s (set by --set train.comm_timeout_s=-inf): must be a "
                      "number >= 0, got -inf"),
            std::string::npos);
  // The bucket sizes' bounds themselves are accepted: 1 byte and 1 TiB.
  const RunSettings edges = settings(
      kMinimal, {"reducer.first_bucket_mb=9.5367431640625e-07", "reducer.bucket_mb=1048576"});
  EXPECT_EQ(edges.buckets.first_bucket_bytes, 1);
  EXPECT_EQ(edges.buckets.bucket_bytes, int64_t{1} << 40);
  EXPECT_EQ(settings(kMinimal, {"train.comm_timeout_s=inf"}).comm_timeout,
            std::numeric_limits<double>::infinity());
  // In the file: the line and column of the value.
  EXPECT_NE(error("model: {name: lenet5}\ndata: {name: synthetic}\nreducer: {name: sum}\n"
                  "train:\n  steps: 3\n  batch_per_rank: -8\n")
                .find("train.batch_per_rank (line 6, column 19): must be > 0, got -8"),
            std::string::npos);
}

}  // namespace
}  // namespace ada::trainer

#include "apps/trainer/checkpoint.h"

#include <yaml-cpp/yaml.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/fault.h"
#include "base/log.h"
#include "base/registry.h"
#include "base/timeline.h"
#include "comm/agreement.h"
#include "comm/watchdog.h"
#include "nn/models/bert_hf.h"
#include "optim/checkpoint.h"

namespace ada::trainer {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {
std::string stem_for(const std::string& dir, int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "ckpt-%08lld", static_cast<long long>(step));
  return dir + "/" + buf;
}

std::string stem_of(const std::string& path) {
  for (const char* ext : {".json", ".safetensors"}) {
    const std::string e = ext;
    if (path.size() > e.size() && path.compare(path.size() - e.size(), e.size(), e) == 0)
      return path.substr(0, path.size() - e.size());
  }
  return path;
}

// "; did you mean --resume auto?" for a --resume value that names no file and is within 2 edits
// of auto, case aside ("atuo", "Auto", "aut"); else "".
std::string did_you_mean_auto(const std::string& which) {
  std::error_code ec;
  if (fs::exists(which, ec) || fs::exists(stem_of(which) + ".json", ec)) return "";
  std::string lower = which;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return edit_distance(lower, "auto") <= 2 ? "; did you mean --resume auto?" : "";
}

std::string dir_of(const std::string& path) {
  const fs::path p(path);
  return p.has_parent_path() ? p.parent_path().string() : ".";
}

json to_json(const FileRecord& f) {
  return {{"name", f.name}, {"bytes", f.bytes}, {"crc32", f.crc32}};
}
}  // namespace

std::string new_run_id() {
  std::random_device rd;
  char buf[17];
  const uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

Checkpointer::Checkpointer(std::string dir, int keep, std::string run_id)
    : dir_(std::move(dir)), keep_(keep), run_id_(std::move(run_id)) {
  ADA_CHECK(keep >= 1) << "Checkpointer: keep " << keep;
}

std::string Checkpointer::rank_file(int64_t step, int rank) const {
  return stem_for(dir_, step) + ".optim-rank" + std::to_string(rank) + ".safetensors";
}

std::string Checkpointer::rank_file_of(const std::string& path, int rank) {
  return stem_of(path) + ".optim-rank" + std::to_string(rank) + ".safetensors";
}

FileRecord Checkpointer::record_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ADA_CHECK_ARG(in.good(), IoError) << "cannot read " << path;
  FileRecord r;
  r.name = fs::path(path).filename().string();
  uLong crc = crc32(0L, Z_NULL, 0);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto got = in.gcount();
    if (got <= 0) break;
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), static_cast<uInt>(got));
    r.bytes += static_cast<uint64_t>(got);
  }
  ADA_CHECK_ARG(in.eof(), IoError) << "reading " << path << " failed";
  r.crc32 = static_cast<uint32_t>(crc);
  return r;
}

void Checkpointer::save(const std::vector<std::pair<std::string, Tensor>>& tensors,
                        const std::map<std::string, std::string>& metadata,
                        CheckpointMeta m) const {
  ADA_CHECK(!run_id_.empty()) << "a checkpoint needs the run's id";
  fs::create_directories(dir_);
  const std::string stem = stem_for(dir_, m.step);
  save_safetensors(stem + ".safetensors", tensors, metadata);
  fault_point("checkpoint_json");  // the tensors are written, the JSON not yet
  m.files.insert(m.files.begin(), record_of(stem + ".safetensors"));
  json files = json::array();
  for (const auto& f : m.files) files.push_back(to_json(f));
  json j = {{"step", m.step},
            {"epoch", m.epoch},
            {"position", m.position},
            {"world_size", m.world_size},
            {"examples_per_step", m.examples_per_step},
            {"base_lr", m.base_lr},
            {"config_hash", std::to_string(m.config_hash)},
            {"config", m.config},
            {"rng_seed", m.rng_seed},
            {"rng_offset", m.rng_offset},
            {"wall_seconds", m.wall_seconds},
            {"run_id", run_id_},
            {"vocab_hash", std::to_string(m.vocab_hash)},
            {"local_optimizer_state", m.local_optimizer_state},
            {"progress", m.progress},
            {"log_window", m.log_window},
            {"log_window_seconds", m.log_window_seconds},
            {"tensors", fs::path(stem).filename().string() + ".safetensors"},
            {"files", files}};
  write_file_atomically(stem + ".json", j.dump(1) + "\n");  // last: now the checkpoint counts
  read_whole_.insert(fs::path(stem).filename().string() + ".json");  // each file's CRC from disk
  prune();
}

std::vector<std::string> Checkpointer::list() const {
  std::vector<std::string> jsons;
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) return jsons;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) == 0 && e.path().extension() == ".json")
      jsons.push_back(e.path().string());
  }
  std::sort(jsons.rbegin(), jsons.rend());  // zero-padded steps: newest first
  return jsons;
}

std::string Checkpointer::run_id_of(const std::string& json_path) {
  try {
    std::ifstream in(json_path);
    const json j = json::parse(in);
    return j.at("run_id").get<std::string>();
  } catch (const std::exception&) {
    return "";
  }
}

CheckpointMeta Checkpointer::read_meta(const std::string& path) {
  const std::string jpath = stem_of(path) + ".json";
  std::ifstream in(jpath);
  ADA_CHECK_ARG(in.good(), IoError)
      << "checkpoint " << jpath << " does not exist or cannot be read";
  try {
    const json j = json::parse(in);
    CheckpointMeta m;
    m.step = j.at("step").get<int64_t>();
    m.epoch = j.at("epoch").get<int64_t>();
    m.position = j.at("position").get<int64_t>();
    m.world_size = j.at("world_size").get<int>();
    if (j.contains("examples_per_step"))
      m.examples_per_step = j.at("examples_per_step").get<int64_t>();
    if (j.contains("base_lr")) m.base_lr = j.at("base_lr").get<double>();
    m.config_hash = std::stoull(j.at("config_hash").get<std::string>());
    if (j.contains("config")) m.config = j.at("config").get<std::string>();
    m.rng_seed = j.at("rng_seed").get<std::vector<uint64_t>>();
    m.rng_offset = j.at("rng_offset").get<std::vector<uint64_t>>();
    m.wall_seconds = j.at("wall_seconds").get<double>();
    m.run_id = j.at("run_id").get<std::string>();
    if (j.contains("vocab_hash")) m.vocab_hash = std::stoull(j.at("vocab_hash").get<std::string>());
    m.local_optimizer_state = j.at("local_optimizer_state").get<bool>();
    if (j.contains("progress")) m.progress = j.at("progress").get<std::map<std::string, double>>();
    if (j.contains("log_window") && j.contains("log_window_seconds")) {
      m.log_window = j.at("log_window").get<std::vector<std::vector<double>>>();
      m.log_window_seconds = j.at("log_window_seconds").get<std::vector<std::vector<double>>>();
    }
    for (const auto& f : j.at("files"))
      m.files.push_back({f.at("name").get<std::string>(), f.at("bytes").get<uint64_t>(),
                         f.at("crc32").get<uint32_t>()});
    ADA_CHECK_ARG(m.world_size >= 1 && m.step >= 0 && m.epoch >= 0 && m.position >= 0, IoError)
        << jpath << ": impossible values (step " << m.step << ", world_size " << m.world_size
        << ")";
    return m;
  } catch (const nlohmann::json::exception& e) {
    ADA_THROW(IoError) << jpath << ": not a valid checkpoint description (" << e.what()
                       << "); the checkpoint is damaged or was written by an older version, resume "
                          "from another one";
  } catch (const std::logic_error&) {  // std::stoull's
    ADA_THROW(IoError) << jpath << ": config_hash or vocab_hash is not a number; the checkpoint "
                       << "is damaged";
  }
  return {};
}

void Checkpointer::check_file(const std::string& json_path, const FileRecord& f, bool whole) {
  const std::string p = dir_of(json_path) + "/" + f.name;
  ADA_CHECK_ARG(fs::exists(p), IoError) << p << " is missing (listed by " << json_path << ")";
  std::error_code ec;
  const FileRecord got = whole ? record_of(p) : FileRecord{f.name, fs::file_size(p, ec), 0};
  ADA_CHECK_ARG(!ec, IoError) << "cannot read the size of " << p << " (" << ec.message() << ")";
  ADA_CHECK_ARG(got.bytes == f.bytes, IoError)
      << p << " has " << got.bytes << " bytes, " << json_path << " says " << f.bytes
      << " (truncated or replaced)";
  ADA_CHECK_ARG(!whole || got.crc32 == f.crc32, IoError)
      << p << " fails its CRC-32 check (damaged)";
}

CheckpointMeta Checkpointer::validate(const std::string& path, const std::string& run_id,
                                      Read read) {
  const CheckpointMeta m = read_meta(path);
  const std::string jpath = stem_of(path) + ".json";
  ADA_CHECK_ARG(run_id.empty() || m.run_id == run_id, IoError)
      << jpath << ": written by run " << m.run_id << ", not by this run (" << run_id << ")";
  ADA_CHECK_ARG(!m.files.empty(), IoError) << jpath << ": lists no files";
  const std::string shared = fs::path(stem_of(jpath)).filename().string() + ".safetensors";
  for (const auto& f : m.files)
    check_file(jpath, f, read == Read::kAll || (read == Read::kShared && f.name == shared));
  if (m.local_optimizer_state)
    for (int r = 0; r < m.world_size; ++r) {
      const std::string rf = fs::path(rank_file_of(jpath, r)).filename().string();
      ADA_CHECK_ARG(std::any_of(m.files.begin(), m.files.end(),
                                [&](const FileRecord& f) { return f.name == rf; }),
                    IoError)
          << jpath << ": does not list rank " << r << "'s optimizer state " << rf;
    }
  if (read != Read::kSizes) read_tensors(jpath);  // the header and sizes parse
  return m;
}

void Checkpointer::read_whole(const std::string& json_path) const {
  read_whole_.insert(fs::path(json_path).filename().string());
}

Checkpointer::Choice Checkpointer::choose(const std::string& run_id, Read read) const {
  Choice c;
  for (const auto& j : list()) {
    try {
      validate(j, run_id, read);
      if (read == Read::kAll) read_whole(j);
      c.path = j;
      return c;
    } catch (const std::exception& e) {
      c.rejected.push_back({j, e.what()});
    }
  }
  return c;
}

NamedTensors Checkpointer::read_tensors(const std::string& path) {
  return load_safetensors(stem_of(path) + ".safetensors");
}

void Checkpointer::remove(const std::string& json_path) {
  const std::string stem = stem_of(json_path);
  std::error_code ec;
  fs::remove(stem + ".json", ec);  // first: the checkpoint stops counting
  const std::string prefix = fs::path(stem).filename().string() + ".";
  for (const auto& e : fs::directory_iterator(dir_of(stem), ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) fs::remove(e.path(), ec);
}

void Checkpointer::prune() const {
  int valid = 0;
  for (const auto& j : list()) {
    if (run_id_of(j) != run_id_) continue;  // another run's (or unreadable): never touched
    const std::string name = fs::path(j).filename().string();
    if (valid < keep_) {
      try {
        validate(j, run_id_, read_whole_.count(name) ? Read::kSizes : Read::kAll);
        read_whole_.insert(name);
        ++valid;
        continue;
      } catch (const std::exception& e) {
        log_warn("checkpoint {} is damaged and is removed: {}", j, e.what());
      }
    }
    read_whole_.erase(name);
    remove(j);
  }
}

void broadcast_model_state(comm::Communicator& world, nn::Model& model, bool buffers_only) {
  if (world.size() == 1) return;
  for (auto& [name, t] : buffers_only ? model.buffers() : model.state()) world.broadcast(t, 0);
}

RunCheckpoints::RunCheckpoints(std::string dir, int keep, bool overwrite, comm::Communicator& world,
                               TrainingState state, uint64_t config_hash, std::string config_yaml)
    : files_(std::move(dir), keep),
      overwrite_(overwrite),
      world_(world),
      state_(state),
      config_hash_(config_hash),
      config_yaml_(std::move(config_yaml)) {}

// The optimizer's, the strategy's and the loss scaler's state (each rank's own where optimizer
// state is local).
void RunCheckpoints::add_step_state(NamedTensors& st) const {
  optim::add_prefixed(st, state_.optimizer.state(), "optim.");
  optim::add_prefixed(st, state_.strategy.state(), "sync.");
  if (state_.loss_scale) optim::add_prefixed(st, state_.loss_scale->state(), "loss_scale.");
}

void RunCheckpoints::load_step_state(const NamedTensors& st) {
  state_.optimizer.load_state(optim::take_prefixed(st, "optim."), state_.params);
  state_.strategy.load_state(optim::take_prefixed(st, "sync."));
  if (state_.loss_scale) state_.loss_scale->load_state(optim::take_prefixed(st, "loss_scale."));
}

void RunCheckpoints::save(int64_t step, double wall_seconds,
                          const std::map<std::string, double>& progress,
                          const LogWindow& log_window) {
  if (last_saved_ == step) return;  // already written at this step
  TraceSpan span("checkpoint", "checkpoint");
  // Every rank is here, the others waiting for rank 0's write: a SIGTERM now is no sign of a
  // peer gone (comm/watchdog.h); the stop is agreed after the checkpoint, at the next step.
  const comm::PatientWait writing;
  last_saved_ = step;
  // BN running stats: rank 0's, so the checkpoint is the model every rank has.
  broadcast_model_state(world_, state_.model, /*buffers_only=*/true);
  CheckpointMeta m;
  m.step = step;
  const auto position = state_.loader.state();
  m.epoch = position.epoch;
  m.position = position.position;
  m.world_size = world_.size();
  m.examples_per_step = examples_per_step();
  m.base_lr = state_.schedule.base_lr();
  m.config_hash = config_hash_;
  m.config = config_yaml_;
  m.vocab_hash = state_.vocab_hash;
  m.wall_seconds = wall_seconds;
  m.progress = progress;
  // Each rank's generator (seed, offset), 64 bits each, gathered as i64 (as doubles a seed x
  // 1000003 + rank past 2^53 was rounded, and a resume drew other dropout masks).
  const Tensor mine =
      Tensor::from_vector<int64_t>({static_cast<int64_t>(state_.model.rng().seed()),
                                    static_cast<int64_t>(state_.model.rng().offset())},
                                   {2});
  Tensor all = Tensor::empty({2 * static_cast<int64_t>(world_.size())}, DType::i64);
  world_.allgather(mine, all);
  const std::vector<int64_t> got = all.to_vector<int64_t>();
  for (size_t r = 0; r < static_cast<size_t>(world_.size()); ++r) {
    m.rng_seed.push_back(static_cast<uint64_t>(got[2 * r]));
    m.rng_offset.push_back(static_cast<uint64_t>(got[2 * r + 1]));
  }
  const auto gather = [&](const std::vector<double>& mine, std::vector<std::vector<double>>& out) {
    const auto n = static_cast<int64_t>(mine.size());
    std::vector<double> all(static_cast<size_t>(n * world_.size()));
    world_.allgather(mine.data(), n, all.data());
    for (int r = 0; r < world_.size(); ++r)
      out.emplace_back(all.begin() + r * n, all.begin() + (r + 1) * n);
  };
  if (!log_window.values.empty()) {
    gather(log_window.values, m.log_window);
    gather(log_window.seconds, m.log_window_seconds);
  }
  // Where optimizer state is local (model-delta, local SGD, DiLoCo, WAGMA) each rank writes its
  // own file before rank 0 completes the checkpoint with the JSON: its optimizer state, the
  // strategy's state and, between synchronisations, its own weights. The shared file then holds
  // the world-average model.
  const bool local_state = state_.strategy.optimizer_state_is_local() && world_.size() > 1;
  m.local_optimizer_state = local_state;
  if (local_state) {
    if (world_.rank() == 0) fs::create_directories(files_.dir());
    world_.barrier();
    NamedTensors st;
    add_step_state(st);
    if (!state_.strategy.replicas_identical())
      for (auto& [k, v] : state_.model.state()) st.tensors.emplace_back("model." + k, v);
    const std::string mine = files_.rank_file(step, world_.rank());
    save_safetensors(mine, st.tensors, st.metadata);
    const FileRecord rec = Checkpointer::record_of(mine);
    const double sent[2] = {static_cast<double>(rec.bytes), static_cast<double>(rec.crc32)};
    std::vector<double> all(2 * world_.size());
    world_.allgather(sent, 2, all.data());
    for (int r = 0; r < world_.size(); ++r)
      m.files.push_back({fs::path(files_.rank_file(step, r)).filename().string(),
                         static_cast<uint64_t>(all[2 * r]), static_cast<uint32_t>(all[2 * r + 1])});
  }
  fault_point("checkpoint");  // every rank, between its own files and the shared ones
  world_.barrier();
  state_.strategy.with_average_model([&] {
    if (world_.rank() != 0) return;
    NamedTensors all;
    for (auto& [k, v] : state_.model.state()) all.tensors.emplace_back("model." + k, v);
    if (!local_state) add_step_state(all);
    optim::add_prefixed(all, state_.schedule.state(), "sched.");
    files_.save(all.tensors, all.metadata, m);
    log_info("checkpoint at step {} written to {}", step, files_.dir());
  });
  world_.barrier();
}

namespace {
// Every scalar or sequence of a YAML document by its dotted key ("reducer.name" -> "adasum").
void flatten(const YAML::Node& node, const std::string& prefix,
             std::map<std::string, std::string>& out) {
  if (node.IsMap()) {
    for (const auto& kv : node)
      flatten(
          kv.second,
          prefix.empty() ? kv.first.as<std::string>() : prefix + "." + kv.first.as<std::string>(),
          out);
    return;
  }
  YAML::Emitter e;
  e << YAML::Flow << node;
  out[prefix] = e.c_str();
}

// "reducer.name adasum -> average, optimizer.lr 0.05 -> 0.5" for the keys whose values differ
// between two resolved configs ("(not set)" for a key one lacks); "" when either is unknown.
std::string config_changes(const std::string& before, const std::string& after) {
  if (before.empty() || after.empty()) return "";
  std::map<std::string, std::string> a, b;
  try {
    flatten(YAML::Load(before), "", a);
    flatten(YAML::Load(after), "", b);
  } catch (const YAML::Exception&) {
    return "";
  }
  std::vector<std::string> changes;
  auto value = [](const std::map<std::string, std::string>& m, const std::string& k) {
    const auto it = m.find(k);
    return it == m.end() ? std::string("(not set)") : it->second;
  };
  std::set<std::string> keys;
  for (const auto& [k, v] : a) keys.insert(k);
  for (const auto& [k, v] : b) keys.insert(k);
  for (const auto& k : keys)
    if (value(a, k) != value(b, k)) changes.push_back(k + " " + value(a, k) + " -> " + value(b, k));
  std::string out;
  for (size_t i = 0; i < changes.size() && i < 12; ++i) out += (i ? ", " : "") + changes[i];
  if (changes.size() > 12) out += " and " + std::to_string(changes.size() - 12) + " more";
  return out;
}

// "\n  rejected PATH: REASON" for each rejected checkpoint.
std::string rejections(const Checkpointer::Choice& choice) {
  std::string why;
  for (const auto& r : choice.rejected) why += "\n  rejected " + r.path + ": " + r.reason;
  return why;
}
}  // namespace

namespace {
// Weights trained on the token ids of one vocabulary, used with another's: each embedding would
// stand for another word (two vocab.txt files of one size are accepted by every shape check).
void check_same_vocab(uint64_t checkpoint, uint64_t ours, const std::string& where,
                      const std::string& path) {
  ADA_CHECK_ARG(checkpoint == 0 || ours == 0 || checkpoint == ours, ConfigError)
      << where << ": " << path << " was trained on the token ids of another vocabulary (hash "
      << checkpoint << ") than this run's data (hash " << ours
      << "), so its embeddings would stand for other words; use the vocab.txt it was trained "
         "with (data.vocab, or shards made from it by prepare_mlm)";
}
}  // namespace

void RunCheckpoints::start_fresh() {
  const std::string id = comm::decide_on_rank0(world_, [&] {
    for (const auto& t : remove_stale_temporaries(files_.dir()))
      log_info("removed {} (left by a crash)", t);
    const auto existing = files_.list();
    if (!existing.empty()) {
      ADA_CHECK_ARG(overwrite_, ConfigError)
          << "checkpoint folder " << files_.dir() << " already holds " << existing.size()
          << " checkpoint(s) of an earlier run (newest " << existing.front()
          << "); continue that run with --resume auto, or write this one elsewhere (output.dir or "
             "checkpoint.dir), or set checkpoint.overwrite: true to delete them";
      for (const auto& j : existing) Checkpointer::remove(j);
      log_info("checkpoint.overwrite: removed {} checkpoint(s) of an earlier run from {}",
               existing.size(), files_.dir());
    }
    return new_run_id();
  });
  files_.set_run_id(id);
}

Checkpointer::Choice RunCheckpoints::choose_together(const std::vector<std::string>& candidates) {
  Checkpointer::Choice c;  // its rejections: rank 0's
  size_t next = 0;
  for (;;) {
    const std::string path = comm::decide_on_rank0(world_, [&]() -> std::string {
      for (; next < candidates.size(); ++next) {
        try {
          Checkpointer::validate(candidates[next], "", Checkpointer::Read::kShared);
          return candidates[next++];
        } catch (const std::exception& e) {
          c.rejected.push_back({candidates[next], e.what()});
        }
      }
      return "";
    });
    if (path.empty()) return c;
    // Each rank reads its own optimizer-state file (in parallel), rank 0 hears which failed:
    // what is wrong with rank r's file, "" when it is good or the checkpoint has none.
    const CheckpointMeta m = Checkpointer::read_meta(path);
    const auto problem = [&](int r) -> std::string {
      const std::string name = fs::path(Checkpointer::rank_file_of(path, r)).filename();
      for (const auto& f : m.files) {
        if (!m.local_optimizer_state || f.name != name) continue;
        try {
          Checkpointer::check_file(path, f, true);
        } catch (const std::exception& e) {
          return e.what();
        }
      }
      return "";
    };
    const double bad = problem(world_.rank()).empty() ? 0 : 1;
    std::vector<double> all(static_cast<size_t>(world_.size()));
    world_.allgather(&bad, 1, all.data());
    std::string why;  // rank 0 reads the first failed file again, for the reason
    for (int r = 0; r < world_.size() && why.empty() && world_.rank() == 0; ++r) {
      if (all[static_cast<size_t>(r)] == 0) continue;
      why = problem(r);
      if (why.empty()) why = "rank " + std::to_string(r) + " could not read its file";
    }
    if (std::none_of(all.begin(), all.end(), [](double b) { return b != 0; })) {
      files_.read_whole(path);
      c.path = path;
      return c;
    }
    if (world_.rank() == 0) c.rejected.push_back({path, why});
  }
}

ResumePoint RunCheckpoints::resume(const std::string& which) {
  // Rank 0 lists the candidates; it reads each one's JSON and shared file, every rank its own
  // optimizer-state file (choose_together); rank 0 then decides for all.
  std::vector<std::string> candidates;
  comm::decide_on_rank0(world_, [&]() -> std::string {
    for (const auto& t : remove_stale_temporaries(files_.dir()))
      log_info("removed {} (left by a crash)", t);
    if (which == "auto") {
      candidates = files_.list();
    } else {
      if (fs::is_directory(which)) {
        const auto here = Checkpointer(which, 1).list();
        ADA_THROW(ConfigError) << "--resume " << which << ": a folder; --resume takes a "
                               << "checkpoint's .json file"
                               << (here.empty() ? "" : " (newest here: " + here.front() + ")")
                               << ", or auto for the newest valid one in checkpoint.dir ("
                               << files_.dir() << ")";
      }
      candidates = {which};
    }
    return "";
  });
  const Checkpointer::Choice choice = choose_together(candidates);
  const std::string path = comm::decide_on_rank0(world_, [&]() -> std::string {
    if (which != "auto") {
      ADA_CHECK_ARG(choice.path.has_value(), IoError)
          << choice.rejected.at(0).reason << did_you_mean_auto(which);
      return which;
    }
    if (!choice.path) {
      ADA_CHECK_ARG(choice.rejected.empty(), IoError)
          << "--resume auto: no valid checkpoint in " << files_.dir() << rejections(choice)
          << "\nresume from a checkpoint you trust with --resume PATH, or start afresh without "
             "--resume (checkpoint.overwrite: true discards these)";
      return "";
    }
    if (!choice.rejected.empty())
      log_warn("--resume auto: newer checkpoints are damaged:{}", rejections(choice));
    return *choice.path;
  });
  if (path.empty()) {
    log_info("--resume auto: {} holds no checkpoint yet; starting fresh", files_.dir());
    start_fresh();
    return {};
  }
  const CheckpointMeta m = Checkpointer::read_meta(path);
  check_same_vocab(m.vocab_hash, state_.vocab_hash, "--resume", path);
  const int64_t position = loader_position(m, path);
  ADA_CHECK_ARG(!m.local_optimizer_state || state_.strategy.optimizer_state_is_local(), ConfigError)
      << path << ": holds each rank's own optimizer state (written with a model-delta or "
      << "decentralised strategy), but this run keeps one shared optimizer state; resume with the "
         "same reducer.target";
  if (m.config_hash != config_hash_) {
    const std::string changed = config_changes(m.config, config_yaml_);
    log_warn(
        "{}: the config differs from the one that wrote this checkpoint{}; continuing with "
        "the new one",
        path, changed.empty() ? "" : ": " + changed);
  }
  files_.set_run_id(m.run_id);
  NamedTensors t = Checkpointer::read_tensors(path);
  state_.model.load_state(optim::take_prefixed(t, "model."));
  last_saved_ = m.step;
  if (m.local_optimizer_state) {  // this rank's own optimizer and strategy state (and weights)
    const NamedTensors mine = load_safetensors(Checkpointer::rank_file_of(path, world_.rank()));
    load_step_state(mine);
    const NamedTensors own = optim::take_prefixed(mine, "model.");
    if (!own.tensors.empty()) state_.model.load_state(own);
  } else {
    load_step_state(t);
  }
  state_.schedule.load_state(optim::take_prefixed(t, "sched."));
  const int r = world_.rank();
  if (r < static_cast<int>(m.rng_seed.size())) {
    state_.model.rng().set_state(m.rng_seed[r], m.rng_offset[r]);
  } else if (!m.rng_offset.empty()) {  // a rank the writing run did not have: its own stream,
    // past every draw any rank made (so it repeats none of its dropout masks)
    state_.model.rng().set_state(state_.model.rng().seed(),
                                 *std::max_element(m.rng_offset.begin(), m.rng_offset.end()));
  }
  state_.loader.restore({m.epoch, position});
  if (m.world_size == world_.size())
    log_info("resumed from {} (step {}, epoch {}, position {})", path, m.step, m.epoch, position);
  else
    log_info(
        "resumed from {} (step {}, epoch {}) written on {} ranks, on {}: {} examples per step as "
        "before; the epoch's first {} examples were read (position {} per rank, was {})",
        path, m.step, m.epoch, m.world_size, world_.size(), m.examples_per_step,
        m.position * m.world_size, position, m.position);
  LogWindow window;  // (on other rank counts the lines go on from a fresh window)
  if (static_cast<int>(m.log_window.size()) == world_.size() &&
      m.log_window_seconds.size() == m.log_window.size())
    window = {m.log_window[r], m.log_window_seconds[r]};
  return {m.step, m.epoch, m.wall_seconds, m.progress, window};
}

int64_t RunCheckpoints::examples_per_step() const {
  return world_.size() * state_.batch_per_rank * state_.micro_batches;
}

// Every rank reads the epoch's permutation interleaved (rank r: its places r, r + world, ...), so
// the m.position x m.world_size examples of the epoch read when `m` was written are its first
// ones, whatever the world size: on `world` ranks each has read that / world of them. The steps,
// the schedule and the epochs go on unchanged when every step takes as many examples as before.
int64_t RunCheckpoints::loader_position(const CheckpointMeta& m, const std::string& path) const {
  const int64_t world = world_.size();
  if (m.world_size == world) return m.position;
  const std::string wrote =
      fmt::format("{}: written by a run on {} ranks, this run has {}", path, m.world_size, world);
  ADA_CHECK_ARG(!m.local_optimizer_state, ConfigError)
      << wrote << "; it holds each rank's own optimizer state (a model-delta or decentralised "
      << "strategy), which cannot be split over another number of ranks: resume it on "
      << m.world_size << " ranks";
  ADA_CHECK_ARG(m.examples_per_step > 0 && m.base_lr > 0, ConfigError)
      << wrote << "; it does not record its examples per step and base LR (an older trainer "
      << "wrote it): resume it on " << m.world_size << " ranks";
  ADA_CHECK_ARG(state_.reducer != "sum", ConfigError)
      << wrote << "; reducer.name: sum hands the optimizer the sum of the ranks' gradients, "
      << "ranks x their mean, so each step would change " << world << "/" << m.world_size
      << "-fold: resume on " << m.world_size << " ranks";
  const int64_t want = m.examples_per_step, per_rank = want / world;
  const int64_t b = state_.batch_per_rank, micro = state_.micro_batches;
  if (examples_per_step() != want) {
    std::string fix;
    const std::string eps = "train.examples_per_step: " + std::to_string(want);
    if (want % world != 0)
      fix = "no setting on " + std::to_string(world) + " ranks gives " + std::to_string(want) +
            " (it is not a multiple of " + std::to_string(world) + ")";
    else if (state_.by_examples_per_step)
      fix = "set " + eps +
            (per_rank % b == 0
                 ? std::string()
                 : " with a train.batch_per_rank that divides " + std::to_string(per_rank));
    else if (per_rank % b == 0)
      fix = "set train.micro_batches: " + std::to_string(per_rank / b) + " (or " + eps +
            " in place of train.micro_batches: it derives them on any number of ranks)";
    else if (per_rank % micro == 0)
      fix = "set train.batch_per_rank: " + std::to_string(per_rank / micro);
    else
      fix = "set train.batch_per_rank x train.micro_batches to " + std::to_string(per_rank);
    ADA_THROW(ConfigError) << wrote << "; it took " << want << " examples per step, this run takes "
                           << world << " ranks x train.batch_per_rank " << b
                           << " x train.micro_batches " << micro << " = " << examples_per_step()
                           << ". A run resumes on another number of ranks only with the same "
                           << "examples per step: " << fix << ", or resume on " << m.world_size
                           << " ranks";
  }
  const double lr = state_.schedule.base_lr();
  if (std::abs(lr - m.base_lr) > 1e-9 * m.base_lr) {
    const double single = state_.optimizer.lr() * m.base_lr / lr;  // optimizer.lr to set
    const std::string or_none =
        state_.reducer == "average"
            ? fmt::format(" (or schedule.lr_scaling: none with optimizer.lr: {})", m.base_lr)
            : "";
    ADA_THROW(ConfigError) << wrote << "; it trained at base LR " << m.base_lr << ", this run's is "
                           << lr << " (optimizer.lr " << state_.optimizer.lr() << " scaled for "
                           << world << " ranks by schedule.lr_scaling, or by "
                           << "schedule.adasum_lr_factor for adasum): to go on at the same LR set "
                           << "optimizer.lr: " << single << or_none << ", or resume on "
                           << m.world_size << " ranks";
  }
  const int64_t read = m.position * m.world_size;  // this epoch's examples read on all ranks
  ADA_CHECK_ARG(read % world == 0, ConfigError)
      << wrote << "; it had read " << read << " examples of epoch " << m.epoch << ", which "
      << world << " ranks cannot share equally: resume on " << m.world_size
      << " ranks, or from a checkpoint at another step";
  return read / world;
}

std::string checkpoint_of(const std::string& from, const std::string& where) {
  // Only the shared file is read: 64 ranks' optimizer states are ~170 GB at BERT-Large.
  if (!fs::is_directory(from)) {
    Checkpointer::validate(from, "", Checkpointer::Read::kShared);
    return from;
  }
  const auto choice = Checkpointer(from, 1).choose("", Checkpointer::Read::kShared);
  ADA_CHECK_ARG(choice.path.has_value(), IoError)
      << where << ": no valid checkpoint in " << from << rejections(choice);
  if (!choice.rejected.empty())
    log_warn("{}: newer checkpoints in {} are damaged, so {} is taken:{}", where, from,
             *choice.path, rejections(choice));
  return *choice.path;
}

std::vector<std::string> checkpoint_files(const std::string& json) {
  std::vector<std::string> files;
  std::error_code ec;
  const fs::path dir =
      fs::path(json).parent_path().empty() ? fs::path(".") : fs::path(json).parent_path();
  const std::string stem = fs::path(stem_of(json)).filename().string() + ".";
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind(stem, 0) == 0) files.push_back(e.path().string());
  return files;
}

std::string init_weights_from(comm::Communicator& world, nn::Model& model, const std::string& from,
                              const std::string& where, uint64_t vocab_hash, bool every_tensor) {
  return comm::decide_on_rank0(world, [&] {
    std::string p = from;
    NamedTensors weights;
    if (!fs::is_directory(p) && fs::path(p).extension() == ".safetensors" &&
        !fs::exists(stem_of(p) + ".json")) {
      // Weights alone: Hugging Face BERT names, or ours (e.g. written by export_hf_bert's twin).
      weights = load_safetensors(p);
      if (nn::is_hf_bert(weights)) weights = nn::import_hf_bert(weights);
    } else {
      p = checkpoint_of(p, where);
      check_same_vocab(Checkpointer::read_meta(p).vocab_hash, vocab_hash, where, p);
      weights = optim::take_prefixed(Checkpointer::read_tensors(p), "model.");
    }
    auto named = [](const std::vector<std::string>& names, size_t most) {
      std::string s;
      for (size_t i = 0; i < names.size() && i < most; ++i) s += (i ? ", " : "") + names[i];
      if (names.size() > most) s += ", ... (" + std::to_string(names.size()) + " in all)";
      return s;
    };
    std::vector<std::string> unused;
    const size_t own = model.state().size();
    std::vector<std::string> fresh;
    try {
      fresh = model.load_present(weights, &unused);
    } catch (const IoError& e) {  // a tensor of another shape: say which key named the file
      ADA_THROW(IoError) << where << ": " << e.what();
    }
    ADA_CHECK_ARG(fresh.size() < own, IoError)
        << where << ": " << p << " holds none of this " << model.type_name() << "'s " << own
        << " tensors"
        << (unused.empty() ? std::string(" (it holds no model tensor)")
                           : " (it holds " + named(unused, 4) + ")")
        << ": weights of another model; name a checkpoint of this one";
    ADA_CHECK_ARG(!every_tensor || fresh.empty(), IoError)
        << where << ": " << p << " lacks " << named(fresh, 8) << " of this " << model.type_name()
        << ", which would stay random here; name a checkpoint trained with this head";
    std::string said = p;
    auto list = [&](const std::vector<std::string>& names, const std::string& what) {
      if (names.empty()) return;
      said += "; " + std::to_string(names.size()) + " " + what + ":";
      for (const auto& n : names) said += " " + n;
    };
    list(fresh, "tensors not in it keep their initial values (a new head)");
    list(unused, "of its tensors match nothing in this model and are left out");
    std::vector<std::string> fixed;  // new and frozen: random for the whole run
    for (const auto& prm : model.parameters())
      if (!prm.var.requires_grad() &&
          std::find(fresh.begin(), fresh.end(), prm.name) != fresh.end())
        fixed.push_back(prm.name);
    list(fixed,
         "of the new tensors are frozen (train.freeze), so they stay random for the whole run");
    return said;
  });
}

}  // namespace ada::trainer

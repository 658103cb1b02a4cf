#include "apps/trainer/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/fault.h"
#include "base/log.h"

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
  ADA_CHECK_ARG(keep >= 1, ConfigError) << "checkpoint.keep must be at least 1, got " << keep;
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
            {"config_hash", std::to_string(m.config_hash)},
            {"rng_seed", m.rng_seed},
            {"rng_offset", m.rng_offset},
            {"wall_seconds", m.wall_seconds},
            {"run_id", run_id_},
            {"local_optimizer_state", m.local_optimizer_state},
            {"tensors", fs::path(stem).filename().string() + ".safetensors"},
            {"files", files}};
  write_file_atomically(stem + ".json", j.dump(1) + "\n");  // last: now the checkpoint counts
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
    m.config_hash = std::stoull(j.at("config_hash").get<std::string>());
    m.rng_seed = j.at("rng_seed").get<std::vector<uint64_t>>();
    m.rng_offset = j.at("rng_offset").get<std::vector<uint64_t>>();
    m.wall_seconds = j.at("wall_seconds").get<double>();
    m.run_id = j.at("run_id").get<std::string>();
    m.local_optimizer_state = j.at("local_optimizer_state").get<bool>();
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
  } catch (const std::invalid_argument&) {
    ADA_THROW(IoError) << jpath << ": config_hash is not a number; the checkpoint is damaged";
  }
  return {};
}

CheckpointMeta Checkpointer::validate(const std::string& path, const std::string& run_id) {
  const CheckpointMeta m = read_meta(path);
  const std::string jpath = stem_of(path) + ".json";
  ADA_CHECK_ARG(run_id.empty() || m.run_id == run_id, IoError)
      << jpath << ": written by run " << m.run_id << ", not by this run (" << run_id << ")";
  ADA_CHECK_ARG(!m.files.empty(), IoError) << jpath << ": lists no files";
  const std::string dir = dir_of(jpath);
  for (const auto& f : m.files) {
    const std::string p = dir + "/" + f.name;
    ADA_CHECK_ARG(fs::exists(p), IoError) << p << " is missing (listed by " << jpath << ")";
    const FileRecord got = record_of(p);
    ADA_CHECK_ARG(got.bytes == f.bytes, IoError)
        << p << " has " << got.bytes << " bytes, " << jpath << " says " << f.bytes
        << " (truncated or replaced)";
    ADA_CHECK_ARG(got.crc32 == f.crc32, IoError) << p << " fails its CRC-32 check (damaged)";
  }
  if (m.local_optimizer_state)
    for (int r = 0; r < m.world_size; ++r) {
      const std::string rf = fs::path(rank_file_of(jpath, r)).filename().string();
      ADA_CHECK_ARG(std::any_of(m.files.begin(), m.files.end(),
                                [&](const FileRecord& f) { return f.name == rf; }),
                    IoError)
          << jpath << ": does not list rank " << r << "'s optimizer state " << rf;
    }
  read_tensors(jpath);  // the header and sizes parse
  return m;
}

Checkpointer::Choice Checkpointer::choose(const std::string& run_id) const {
  Choice c;
  for (const auto& j : list()) {
    try {
      validate(j, run_id);
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
    if (valid < keep_) {
      try {
        validate(j, run_id_);
        ++valid;
        continue;
      } catch (const std::exception& e) {
        log_warn("checkpoint {} is damaged and is removed: {}", j, e.what());
      }
    }
    remove(j);
  }
}

}  // namespace ada::trainer

#include "apps/trainer/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/log.h"

namespace ada::trainer {
namespace fs = std::filesystem;

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

void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    ADA_CHECK_ARG(out.good(), IoError) << "cannot write " << tmp << " (check the checkpoint folder)";
    out << text;
    out.flush();
    ADA_CHECK_ARG(out.good(), IoError) << "writing " << tmp << " failed (disk full?)";
  }
  int fd = ::open(tmp.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  ADA_CHECK_ARG(std::rename(tmp.c_str(), path.c_str()) == 0, IoError)
      << "cannot rename " << tmp << " to " << path;
}

std::string u64_list(const std::vector<uint64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}
}  // namespace

std::string Checkpointer::rank_file(int64_t step, int rank) const {
  return stem_for(dir_, step) + ".optim-rank" + std::to_string(rank) + ".safetensors";
}

std::string Checkpointer::rank_file_of(const std::string& path, int rank) {
  return stem_of(path) + ".optim-rank" + std::to_string(rank) + ".safetensors";
}

Checkpointer::Checkpointer(std::string dir, int keep) : dir_(std::move(dir)), keep_(keep) {
  ADA_CHECK_ARG(keep >= 1, ConfigError) << "checkpoint.keep must be at least 1, got " << keep;
}

void Checkpointer::save(const std::vector<std::pair<std::string, Tensor>>& tensors,
                        const std::map<std::string, std::string>& metadata,
                        const CheckpointMeta& m) const {
  fs::create_directories(dir_);
  const std::string stem = stem_for(dir_, m.step);
  save_safetensors(stem + ".safetensors", tensors, metadata);
  std::ostringstream js;
  js << "{\"step\": " << m.step << ", \"epoch\": " << m.epoch << ", \"position\": " << m.position
     << ", \"world_size\": " << m.world_size << ", \"config_hash\": \"" << m.config_hash
     << "\", \"rng_seed\": " << u64_list(m.rng_seed) << ", \"rng_offset\": " << u64_list(m.rng_offset)
     << ", \"wall_seconds\": " << m.wall_seconds << ", \"tensors\": \"" << fs::path(stem).filename().string()
     << ".safetensors\"}\n";
  write_atomically(stem + ".json", js.str());
  // Prune: keep the newest `keep_` complete checkpoints.
  std::vector<std::string> stems;
  for (const auto& e : fs::directory_iterator(dir_)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) == 0 && e.path().extension() == ".json") stems.push_back(stem_of(e.path().string()));
  }
  std::sort(stems.begin(), stems.end());
  for (size_t i = 0; i + keep_ < stems.size(); ++i) {
    fs::remove(stems[i] + ".json");  // first: the checkpoint stops counting as complete
    const std::string prefix = fs::path(stems[i]).filename().string() + ".";
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().filename().string().rfind(prefix, 0) == 0) fs::remove(e.path());
  }
}

std::optional<std::string> Checkpointer::latest() const {
  if (!fs::is_directory(dir_)) return std::nullopt;
  std::vector<std::string> jsons;
  for (const auto& e : fs::directory_iterator(dir_)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) == 0 && e.path().extension() == ".json") jsons.push_back(e.path().string());
  }
  std::sort(jsons.rbegin(), jsons.rend());
  for (const auto& j : jsons) {
    try {
      read_meta(j);
      read_tensors(j);  // validates the header and sizes
      return j;
    } catch (const std::exception& e) {
      log_warn("skipping checkpoint {}: {}", j, e.what());
    }
  }
  return std::nullopt;
}

CheckpointMeta Checkpointer::read_meta(const std::string& path) {
  const std::string json = stem_of(path) + ".json";
  ADA_CHECK_ARG(fs::exists(json), IoError) << "checkpoint " << json << " does not exist";
  try {
    YAML::Node n = YAML::LoadFile(json);  // JSON is YAML
    CheckpointMeta m;
    m.step = n["step"].as<int64_t>();
    m.epoch = n["epoch"].as<int64_t>();
    m.position = n["position"].as<int64_t>();
    m.world_size = n["world_size"].as<int>();
    m.config_hash = std::stoull(n["config_hash"].as<std::string>());
    m.rng_seed = n["rng_seed"].as<std::vector<uint64_t>>();
    m.rng_offset = n["rng_offset"].as<std::vector<uint64_t>>();
    m.wall_seconds = n["wall_seconds"].as<double>();
    return m;
  } catch (const YAML::Exception& e) {
    ADA_THROW(IoError) << json << ": not a valid checkpoint description (" << e.what()
                       << "); the checkpoint is damaged, resume from another one";
  }
  return {};
}

NamedTensors Checkpointer::read_tensors(const std::string& path) {
  return load_safetensors(stem_of(path) + ".safetensors");
}

}  // namespace ada::trainer

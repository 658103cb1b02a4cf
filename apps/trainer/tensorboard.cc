#include "apps/trainer/tensorboard.h"

#include <nmmintrin.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iterator>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/log.h"
#include "tensorboard.pb.h"

namespace ada::trainer {
namespace fs = std::filesystem;
namespace {

constexpr char kSuffix[] = ".adatrain";  // our event files (another writer's stay untouched)

bool is_ours(const fs::path& p) {
  const std::string name = p.filename().string();
  return name.rfind("events.out.tfevents.", 0) == 0 && name.size() > sizeof(kSuffix) &&
         name.compare(name.size() - (sizeof(kSuffix) - 1), sizeof(kSuffix) - 1, kSuffix) == 0;
}

std::vector<fs::path> our_files(const std::string& folder) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(folder, ec))
    if (e.is_regular_file() && is_ours(e.path())) out.push_back(e.path());
  std::sort(out.begin(), out.end());  // the time stamp in the name orders them
  return out;
}

void put_le(std::string& s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
}

uint64_t get_le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

// One TFRecord frame around a serialised event.
std::string frame(const tensorboard::Event& event) {
  const std::string data = event.SerializeAsString();
  std::string out, len;
  put_le(len, data.size(), 8);
  out += len;
  put_le(out, masked_crc32c(len.data(), len.size()), 4);
  out += data;
  put_le(out, masked_crc32c(data.data(), data.size()), 4);
  return out;
}

tensorboard::Event to_proto(const ScalarEvent& e) {
  tensorboard::Event ev;
  ev.set_wall_time(e.wall_time);
  ev.set_step(e.step);
  for (const auto& [tag, value] : e.values) {
    auto* v = ev.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(value);
  }
  return ev;
}

std::string version_frame() {
  tensorboard::Event ev;
  ev.set_wall_time(
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  ev.set_file_version("brain.Event:2");
  return frame(ev);
}

std::string new_file_name(const std::string& folder) {
  char host[256] = "host";
  gethostname(host, sizeof host - 1);
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return folder + "/events.out.tfevents." +
         std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now).count()) + "." +
         host + "." + std::to_string(getpid()) + kSuffix;
}

}  // namespace

uint32_t masked_crc32c(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t crc = 0xFFFFFFFFu;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    crc = _mm_crc32_u64(crc, word);
  }
  uint32_t c = static_cast<uint32_t>(crc);
  for (; n > 0; --n, ++p) c = _mm_crc32_u8(c, *p);
  c ^= 0xFFFFFFFFu;
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

namespace {
// The scalar events of one event file, appended to `out`; IoError at a damaged frame or message.
void read_file_events(const fs::path& path, std::vector<ScalarEvent>& out) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = 0;
  while (at + 12 <= bytes.size()) {
    const uint64_t len = get_le(bytes.data() + at, 8);
    ADA_CHECK_ARG(get_le(bytes.data() + at + 8, 4) == masked_crc32c(bytes.data() + at, 8), IoError)
        << path.string() << ": the frame at byte " << at << " has a damaged length";
    if (at + 12 + len + 4 > bytes.size()) break;  // cut short by a crash: the rest is lost
    const char* data = bytes.data() + at + 12;
    ADA_CHECK_ARG(get_le(data + len, 4) == masked_crc32c(data, len), IoError)
        << path.string() << ": the event at byte " << at << " fails its CRC-32C";
    tensorboard::Event ev;
    ADA_CHECK_ARG(ev.ParseFromArray(data, static_cast<int>(len)), IoError)
        << path.string() << ": the event at byte " << at << " is not an Event message";
    if (ev.has_summary()) {
      ScalarEvent e{ev.step(), ev.wall_time(), {}};
      for (const auto& v : ev.summary().value()) e.values.push_back({v.tag(), v.simple_value()});
      out.push_back(std::move(e));
    }
    at += 12 + len + 4;
  }
}
}  // namespace

std::vector<ScalarEvent> read_scalar_events(const std::string& folder, std::string* damage) {
  std::vector<ScalarEvent> out;
  for (const auto& path : our_files(folder)) {
    try {
      read_file_events(path, out);
    } catch (const IoError& e) {
      if (!damage) throw;
      *damage = e.what();  // the events before the damage are kept; this file's rest is not read
    }
  }
  return out;
}

TensorBoardWriter::TensorBoardWriter(const std::string& folder, int64_t resumed_step,
                                     bool evaluates_again) {
  std::error_code ec;
  fs::create_directories(folder, ec);
  ADA_CHECK_ARG(!ec, IoError) << "cannot create the TensorBoard folder " << folder << " ("
                              << ec.message() << ")";
  std::string start = version_frame();
  std::string damage;
  if (resumed_step > 0)  // the curves so far, up to the resumed step
    for (const auto& e : read_scalar_events(folder, &damage)) {
      const bool evaluation = std::none_of(e.values.begin(), e.values.end(),
                                           [](const auto& v) { return v.first == "lr"; });
      if (kept_on_resume(e.step, evaluation, resumed_step, evaluates_again))
        start += frame(to_proto(e));
    }
  if (!damage.empty())
    log_warn(
        "train.tensorboard: {}; the curves up to there are kept, the rest of that file is not "
        "(training goes on)",
        damage);
  const auto old = our_files(folder);
  path_ = new_file_name(folder);
  write_file_atomically(path_, start);
  for (const auto& p : old)
    if (p != path_) fs::remove(p, ec);
  out_.open(path_, std::ios::binary | std::ios::app);
  ADA_CHECK_ARG(out_.good(), IoError) << "cannot append to " << path_;
}

void TensorBoardWriter::write(const ScalarEvent& event) {
  out_ << frame(to_proto(event));
  out_.flush();
  ADA_CHECK_ARG(out_.good(), IoError) << "cannot write to " << path_;
}

}  // namespace ada::trainer

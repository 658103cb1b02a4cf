// train.tensorboard: the run's scalars as TensorBoard event files, written by rank 0 as the run
// goes, into DIR/<run name>/events.out.tfevents.<time>.<host>.adatrain (one folder per run, so
// runs sit side by side in TensorBoard). Events are protobuf messages (tensorboard.proto) in
// TFRecord frames (length, masked CRC-32C of the length, data, masked CRC-32C of the data).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace ada::trainer {

// TFRecord's masked CRC-32C (Castagnoli): rotate right by 15, add 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);

// Whether a metrics record (a line, an event) of `step` is kept when a run resumes at
// `resumed_step`: those before it, and those of it unless the run evaluates that step again
// (`evaluates_again`: resumed at its end) and the record is that evaluation (one without an "lr",
// which every training window's record has).
inline bool kept_on_resume(int64_t step, bool evaluation, int64_t resumed_step,
                           bool evaluates_again) {
  return step < resumed_step || (step == resumed_step && !(evaluates_again && evaluation));
}

struct ScalarEvent {
  int64_t step = 0;
  double wall_time = 0;  // seconds since the Unix epoch
  std::vector<std::pair<std::string, float>> values;
};

class TensorBoardWriter {
 public:
  // Opens `folder` (created if absent). A resumed run (`resumed_step` > 0) keeps the scalars of
  // the folder's event files up to that step, rewritten into a new file that replaces them, so
  // its curves continue without duplicates; a fresh run starts the folder's files afresh.
  // `evaluates_again`: the events of `resumed_step` without an "lr" (its evaluation, which the
  // resumed run repeats) are not kept.
  TensorBoardWriter(const std::string& folder, int64_t resumed_step, bool evaluates_again = false);
  // Appends one event (flushed: TensorBoard shows it while the run goes on).
  void write(const ScalarEvent& event);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

// Every scalar event of the event files in `folder` (ours), in file order; IoError naming the file
// and offset for a damaged frame or message, except a last frame cut short (a crash). With
// `damage`: no error; the events before a damage, which *damage describes (else left as it is).
std::vector<ScalarEvent> read_scalar_events(const std::string& folder,
                                            std::string* damage = nullptr);

}  // namespace ada::trainer

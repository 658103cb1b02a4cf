#include "data/mlm_shards.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "base/error.h"
#include "base/same_files.h"

namespace ada::data {

static_assert(std::endian::native == std::endian::little,
              "MLM shards are little-endian and memory-mapped: a big-endian host needs a reader "
              "that swaps bytes");

namespace {

constexpr char kMagic[8] = {'A', 'D', 'A', 'M', 'L', 'M', 'S', 'H'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kHeaderBytes = 128;
constexpr const char* kRemake =
    "; rebuild the shards with build/bin/prepare_mlm (see apps/prepare_mlm.cc)";

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint32_t token_bytes;
  uint32_t vocab_size;
  uint64_t vocab_hash;
  int32_t special[5];
  uint32_t reserved;
  uint64_t num_docs, num_segs, num_tokens;
  uint64_t docs_offset, segs_offset, tokens_offset, file_bytes;
  uint64_t payload_fnv;
  uint64_t header_fnv;
};
static_assert(sizeof(Header) == kHeaderBytes);
static_assert(offsetof(Header, vocab_hash) == 24 && offsetof(Header, num_docs) == 56 &&
              offsetof(Header, payload_fnv) == 112 && offsetof(Header, header_fnv) == 120);

std::string errno_text() {
  return std::strerror(errno);
}

std::string with_commas(uint64_t v) {
  const std::string digits = std::to_string(v);
  std::string s;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s.push_back(',');
    s.push_back(digits[i]);
  }
  return s;
}

}  // namespace

MlmVocabInfo MlmVocabInfo::of(const Tokenizer& tok) {
  MlmVocabInfo v;
  v.vocab_size = static_cast<uint32_t>(tok.vocab_size());
  v.vocab_hash = tok.vocab_hash();
  v.special = tok.special_ids();
  return v;
}

bool MlmVocabInfo::operator==(const MlmVocabInfo& o) const {
  return vocab_size == o.vocab_size && vocab_hash == o.vocab_hash && special.pad == o.special.pad &&
         special.unk == o.special.unk && special.cls == o.special.cls &&
         special.sep == o.special.sep && special.mask == o.special.mask;
}

// ---- writer -------------------------------------------------------------------------------------

MlmShardWriter::MlmShardWriter(std::string path, MlmVocabInfo vocab)
    : path_(std::move(path)), vocab_(vocab) {
  ADA_CHECK_ARG(vocab_.vocab_size > 0, ConfigError)
      << "MLM shard " << path_ << ": vocabulary size 0; build the writer from a loaded Tokenizer";
}

void MlmShardWriter::add_segment(const std::vector<int32_t>& ids) {
  ADA_CHECK(!finished_) << "add_segment after finish() on " << path_;
  if (ids.empty()) return;
  for (int32_t id : ids)
    ADA_CHECK(id >= 0 && static_cast<uint32_t>(id) < vocab_.vocab_size)
        << "token id " << id << " outside the vocabulary of " << vocab_.vocab_size << " (" << path_
        << ")";
  tokens_.insert(tokens_.end(), ids.begin(), ids.end());
  seg_index_.push_back(tokens_.size());
}

void MlmShardWriter::end_document() {
  if (seg_index_.size() - 1 > doc_index_.back()) doc_index_.push_back(seg_index_.size() - 1);
}

void MlmShardWriter::finish() {
  ADA_CHECK(!finished_) << "finish() twice on " << path_;
  end_document();
  finished_ = true;
  const uint32_t width = vocab_.vocab_size <= 65536 ? 2 : 4;
  Header h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  h.header_bytes = kHeaderBytes;
  h.token_bytes = width;
  h.vocab_size = vocab_.vocab_size;
  h.vocab_hash = vocab_.vocab_hash;
  const SpecialIds& s = vocab_.special;
  const int32_t special[5] = {s.pad, s.unk, s.cls, s.sep, s.mask};
  std::memcpy(h.special, special, sizeof(special));
  h.num_docs = num_documents();
  h.num_segs = num_segments();
  h.num_tokens = num_tokens();
  h.docs_offset = kHeaderBytes;
  h.segs_offset = h.docs_offset + 8 * (h.num_docs + 1);
  h.tokens_offset = h.segs_offset + 8 * (h.num_segs + 1);
  h.file_bytes = h.tokens_offset + width * h.num_tokens;

  std::string payload;
  payload.resize(h.file_bytes - kHeaderBytes);
  char* p = payload.data();
  std::memcpy(p, doc_index_.data(), 8 * doc_index_.size());
  p += 8 * doc_index_.size();
  std::memcpy(p, seg_index_.data(), 8 * seg_index_.size());
  p += 8 * seg_index_.size();
  if (width == 4) {
    std::memcpy(p, tokens_.data(), 4 * tokens_.size());
  } else {
    for (size_t i = 0; i < tokens_.size(); ++i) {
      const auto v = static_cast<uint16_t>(tokens_[i]);
      std::memcpy(p + 2 * i, &v, 2);
    }
  }
  h.payload_fnv = fnv1a64(payload.data(), payload.size());
  h.header_fnv = fnv1a64(&h, offsetof(Header, header_fnv));

  const std::string tmp = path_ + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ADA_CHECK_ARG(fd >= 0, IoError) << "MLM shard " << path_ << ": cannot create " << tmp << ": "
                                  << errno_text()
                                  << "; check that the folder exists and is writable";
  auto write_all = [&](const void* data, size_t n) {
    const char* c = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd, c, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      c += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  };
  const bool ok =
      write_all(&h, sizeof(h)) && write_all(payload.data(), payload.size()) && ::fsync(fd) == 0;
  const std::string why = ok ? "" : errno_text();
  ::close(fd);
  if (!ok || std::rename(tmp.c_str(), path_.c_str()) != 0) {
    const std::string msg = ok ? errno_text() : why;
    ::unlink(tmp.c_str());
    ADA_THROW(IoError) << "MLM shard " << path_ << ": writing failed: " << msg
                       << "; check free disk space and permissions";
  }
  // Persist the rename itself (best effort: some file systems refuse fsync on folders).
  std::string dir = std::filesystem::path(path_).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

// ---- reader -------------------------------------------------------------------------------------

std::shared_ptr<const MlmShard> MlmShard::open(const std::string& path) {
  std::shared_ptr<MlmShard> s(new MlmShard());
  s->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ADA_CHECK_ARG(fd >= 0, IoError) << "MLM shard " << path << ": cannot open: " << errno_text()
                                  << kRemake;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string e = errno_text();
    ::close(fd);
    ADA_THROW(IoError) << "MLM shard " << path << ": cannot stat: " << e;
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < kHeaderBytes) {
    ::close(fd);
    ADA_THROW(IoError) << "MLM shard " << path << ": " << size << " bytes, shorter than the "
                       << kHeaderBytes << "-byte header: truncated or not a shard" << kRemake;
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  const std::string map_err = map == MAP_FAILED ? errno_text() : "";
  ::close(fd);
  ADA_CHECK_ARG(map != MAP_FAILED, IoError) << "MLM shard " << path << ": mmap failed: " << map_err;
  s->map_ = map;
  s->map_bytes_ = size;

  Header h;
  std::memcpy(&h, map, sizeof(h));
  auto bad = [&](const std::string& what) {
    ADA_THROW(IoError) << "MLM shard " << path << ": " << what << kRemake;
  };
  if (std::memcmp(h.magic, kMagic, 8) != 0) bad("bad magic (not an MLM shard)");
  if (h.version != kVersion)
    bad("format version " + std::to_string(h.version) + "; this build reads version " +
        std::to_string(kVersion));
  if (fnv1a64(&h, offsetof(Header, header_fnv)) != h.header_fnv)
    bad("header checksum mismatch (corrupt header)");
  if (h.header_bytes != kHeaderBytes || (h.token_bytes != 2 && h.token_bytes != 4) ||
      h.vocab_size == 0 || h.vocab_size > 0x7fffffffu ||  // ids are int32 (found by fuzz_mlm_shard)
      (h.token_bytes == 2 && h.vocab_size > 65536))
    bad("inconsistent header (header bytes, token width or vocabulary size)");
  const char* special_names[5] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (int k = 0; k < 5; ++k)
    if (h.special[k] < -1 || (h.special[k] >= 0 && uint32_t(h.special[k]) >= h.vocab_size))
      bad(std::string("the id of ") + special_names[k] + " is " + std::to_string(h.special[k]) +
          ", outside the vocabulary of " + std::to_string(h.vocab_size) + " (corrupt header)");
  // Counts bounded by the file size first, so that the offset arithmetic cannot overflow.
  if (h.num_docs > size / 8 || h.num_segs > size / 8 || h.num_tokens > size / 2)
    bad("document/segment/token counts larger than the file");
  const uint64_t segs_off = kHeaderBytes + 8 * (h.num_docs + 1);
  const uint64_t toks_off = segs_off + 8 * (h.num_segs + 1);
  const uint64_t file_bytes = toks_off + uint64_t{h.token_bytes} * h.num_tokens;
  if (h.docs_offset != kHeaderBytes || h.segs_offset != segs_off || h.tokens_offset != toks_off ||
      h.file_bytes != file_bytes)
    bad("inconsistent header offsets");
  if (size != file_bytes) {
    std::ostringstream m;
    m << size << " bytes but the header describes " << file_bytes << " ("
      << (size < file_bytes ? "truncated" : "trailing bytes") << ")";
    bad(m.str());
  }
  const char* base = static_cast<const char*>(map);
  s->doc_index_ = reinterpret_cast<const uint64_t*>(base + h.docs_offset);
  s->seg_index_ = reinterpret_cast<const uint64_t*>(base + h.segs_offset);
  s->tokens_ = base + h.tokens_offset;
  s->wide_ = h.token_bytes == 4;
  s->num_docs_ = h.num_docs;
  s->num_segs_ = h.num_segs;
  s->num_tokens_ = h.num_tokens;
  s->payload_hash_ = h.payload_fnv;
  s->vocab_.vocab_size = h.vocab_size;
  s->vocab_.vocab_hash = h.vocab_hash;
  s->vocab_.special = {h.special[0], h.special[1], h.special[2], h.special[3], h.special[4]};
  // Index arrays: from 0 to S (resp. T), strictly increasing (nothing empty).
  if (s->doc_index_[0] != 0 || s->doc_index_[h.num_docs] != h.num_segs)
    bad("document index does not span the segments");
  for (uint64_t d = 0; d < h.num_docs; ++d)
    if (s->doc_index_[d + 1] <= s->doc_index_[d])
      bad("document index not increasing at document " + std::to_string(d));
  if (s->seg_index_[0] != 0 || s->seg_index_[h.num_segs] != h.num_tokens)
    bad("segment index does not span the tokens");
  for (uint64_t i = 0; i < h.num_segs; ++i)
    if (s->seg_index_[i + 1] <= s->seg_index_[i])
      bad("segment index not increasing at segment " + std::to_string(i));
  return s;
}

MlmShard::~MlmShard() {
  if (map_) ::munmap(map_, map_bytes_);
}

uint64_t MlmShard::document_of_segment(uint64_t s) const {
  const uint64_t* end = doc_index_ + num_docs_ + 1;
  return static_cast<uint64_t>(std::upper_bound(doc_index_, end, s) - doc_index_) - 1;
}

void MlmShard::copy_tokens(uint64_t begin, uint64_t end, int32_t* out) const {
  ADA_CHECK(begin <= end && end <= num_tokens_)
      << "tokens [" << begin << ", " << end << ") outside " << path_;
  if (wide_) {
    std::memcpy(out, static_cast<const int32_t*>(tokens_) + begin, 4 * (end - begin));
  } else {
    const auto* p = static_cast<const uint16_t*>(tokens_);
    for (uint64_t i = begin; i < end; ++i) *out++ = p[i];
  }
}

void MlmShard::verify() const {
  const char* base = static_cast<const char*>(map_);
  if (fnv1a64(base + kHeaderBytes, map_bytes_ - kHeaderBytes) != payload_hash_)
    ADA_THROW(IoError) << "MLM shard " << path_ << ": payload checksum mismatch (corrupt data)"
                       << kRemake;
  // The largest id first, in a loop the compiler vectorises; the offending token only if needed.
  uint32_t largest = 0;
  if (wide_) {
    const auto* p = static_cast<const uint32_t*>(tokens_);  // a negative id reads as huge
    for (uint64_t i = 0; i < num_tokens_; ++i) largest = std::max(largest, p[i]);
  } else {
    const auto* p = static_cast<const uint16_t*>(tokens_);
    uint16_t m = 0;
    for (uint64_t i = 0; i < num_tokens_; ++i) m = std::max(m, p[i]);
    largest = m;
  }
  if (largest < vocab_.vocab_size) return;
  for (uint64_t i = 0; i < num_tokens_; ++i)
    if (static_cast<uint32_t>(token(i)) >= vocab_.vocab_size) {
      const uint64_t seg = static_cast<uint64_t>(
          std::upper_bound(seg_index_, seg_index_ + num_segs_ + 1, i) - seg_index_ - 1);
      ADA_THROW(IoError) << "MLM shard " << path_ << ": token " << i << " (segment " << seg
                         << " of document " << document_of_segment(seg) << ") has id " << token(i)
                         << ", outside the vocabulary of " << vocab_.vocab_size << kRemake;
    }
}

// ---- corpus -------------------------------------------------------------------------------------

MlmCorpus MlmCorpus::open(const std::vector<std::string>& paths, ShardVerification verify) {
  namespace fs = std::filesystem;
  ADA_CHECK_ARG(!paths.empty(), IoError) << "MLM corpus: no shard files or folders given";
  std::vector<std::shared_ptr<const MlmShard>> shards;
  SameFiles listed;  // a shard reached twice would count its documents twice
  const auto add = [&](const std::string& file, const std::string& through) {
    const std::string before = listed.add(file, through);
    ADA_CHECK_ARG(before.empty(), IoError)
        << "MLM corpus: shard " << file << " is listed twice (through " << before << " and "
        << through << "), so its documents would count twice; list each shard or folder once";
    shards.push_back(MlmShard::open(file));
  };
  for (const std::string& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<std::string> files;
      for (const auto& e : fs::directory_iterator(p, ec))
        if (e.is_regular_file() && e.path().extension() == ".mlm")
          files.push_back(e.path().string());
      ADA_CHECK_ARG(!ec, IoError) << "MLM corpus: cannot list " << p << ": " << ec.message();
      ADA_CHECK_ARG(!files.empty(), IoError)
          << "MLM corpus: folder " << p << " holds no *.mlm shard" << kRemake;
      std::sort(files.begin(), files.end());
      for (const auto& f : files) add(f, p);
    } else {
      ADA_CHECK_ARG(fs::exists(p, ec), IoError)
          << "MLM corpus: " << p << " does not exist" << kRemake;
      add(p, p);
    }
  }
  MlmCorpus corpus(std::move(shards));  // vocabularies agree before the payloads are read
  for (size_t i = 0; i < corpus.shards().size(); ++i)
    if (verify.covers(i)) corpus.shards()[i]->verify();
  return corpus;
}

MlmCorpus::MlmCorpus(std::vector<std::shared_ptr<const MlmShard>> shards)
    : shards_(std::move(shards)) {
  ADA_CHECK_ARG(!shards_.empty(), IoError) << "MLM corpus: no shards";
  for (const auto& s : shards_) {
    ADA_CHECK_ARG(s->vocab() == shards_.front()->vocab(), IoError)
        << "MLM corpus: shard " << s->path() << " was made with another vocabulary than "
        << shards_.front()->path() << " (size " << s->vocab().vocab_size << " vs "
        << shards_.front()->vocab().vocab_size << ", or a different vocab hash / special ids); "
        << "rebuild all shards with one vocab.txt";
    doc_start_.push_back(doc_start_.back() + s->num_documents());
    seg_start_.push_back(seg_start_.back() + s->num_segments());
    tok_start_.push_back(tok_start_.back() + s->num_tokens());
  }
}

size_t MlmCorpus::shard_of_segment(uint64_t s, uint64_t* local) const {
  ADA_CHECK(s < num_segments()) << "segment " << s << " of " << num_segments();
  const size_t k = static_cast<size_t>(std::upper_bound(seg_start_.begin(), seg_start_.end(), s) -
                                       seg_start_.begin()) -
                   1;
  *local = s - seg_start_[k];
  return k;
}

size_t MlmCorpus::shard_of_document(uint64_t d, uint64_t* local) const {
  ADA_CHECK(d < num_documents()) << "document " << d << " of " << num_documents();
  const size_t k = static_cast<size_t>(std::upper_bound(doc_start_.begin(), doc_start_.end(), d) -
                                       doc_start_.begin()) -
                   1;
  *local = d - doc_start_[k];
  return k;
}

uint64_t MlmCorpus::doc_first_segment(uint64_t d) const {
  uint64_t local;
  const size_t k = shard_of_document(d, &local);
  return seg_start_[k] + shards_[k]->doc_begin(local);
}

uint64_t MlmCorpus::doc_end_segment(uint64_t d) const {
  uint64_t local;
  const size_t k = shard_of_document(d, &local);
  return seg_start_[k] + shards_[k]->doc_begin(local + 1);
}

uint64_t MlmCorpus::document_of_segment(uint64_t s) const {
  uint64_t local;
  const size_t k = shard_of_segment(s, &local);
  return doc_start_[k] + shards_[k]->document_of_segment(local);
}

uint64_t MlmCorpus::segment_length(uint64_t s) const {
  uint64_t local;
  const size_t k = shard_of_segment(s, &local);
  return shards_[k]->seg_begin(local + 1) - shards_[k]->seg_begin(local);
}

void MlmCorpus::copy_segment(uint64_t s, uint64_t from, uint64_t count, int32_t* out) const {
  uint64_t local;
  const size_t k = shard_of_segment(s, &local);
  const uint64_t b = shards_[k]->seg_begin(local), e = shards_[k]->seg_begin(local + 1);
  ADA_CHECK(from + count <= e - b)
      << "segment " << s << ": tokens [" << from << ", " << from + count << ") of " << e - b;
  shards_[k]->copy_tokens(b + from, b + from + count, out);
}

std::string MlmCorpus::describe() const {
  std::ostringstream o;
  o << shards_.size() << (shards_.size() == 1 ? " shard (" : " shards (") << shards_.front()->path()
    << (shards_.size() > 1 ? " ..." : "") << "): " << with_commas(num_documents()) << " documents, "
    << with_commas(num_segments()) << " segments, " << with_commas(num_tokens()) << " tokens";
  return o.str();
}

}  // namespace ada::data

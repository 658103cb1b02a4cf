// MLM shards: a tokenised text corpus on disk, as binary files that are memory-mapped when read.
// A shard holds documents; a document holds segments (one input line each: BERT's "sentences");
// a segment holds token ids. MlmShardWriter writes one shard atomically, MlmShard maps and
// validates one, MlmCorpus numbers the documents and segments of several shards globally.
// The file format (version 1): data/README.md, "MLM shard format".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace ada::data {

// What token ids in a shard mean: the vocabulary they index.
struct MlmVocabInfo {
  uint32_t vocab_size = 0;
  uint64_t vocab_hash = 0;
  SpecialIds special;

  static MlmVocabInfo of(const Tokenizer& tok);
  bool operator==(const MlmVocabInfo& o) const;
};

class MlmShardWriter {
 public:
  // Nothing touches the disk before finish(). ConfigError on a vocabulary size of 0.
  MlmShardWriter(std::string path, MlmVocabInfo vocab);
  // Appends one segment to the current document (an empty one is ignored). InternalError on an
  // id outside [0, vocab_size).
  void add_segment(const std::vector<int32_t>& ids);
  // Closes the current document (nothing happens if it has no segments).
  void end_document();
  // Ends the open document and writes the file: to PATH.tmp.PID, flushed and fsync'ed, then
  // renamed onto PATH, so PATH is either the old file or the complete new one. IoError on failure.
  void finish();

  uint64_t num_documents() const { return doc_index_.size() - 1; }
  uint64_t num_segments() const { return seg_index_.size() - 1; }
  uint64_t num_tokens() const { return tokens_.size(); }

 private:
  std::string path_;
  MlmVocabInfo vocab_;
  std::vector<uint64_t> doc_index_{0};
  std::vector<uint64_t> seg_index_{0};
  std::vector<int32_t> tokens_;
  bool finished_ = false;
};

class MlmShard {
 public:
  // Maps `path` and validates the header (special ids inside the vocabulary included) and the
  // index arrays. IoError naming the file if it is missing, not a shard (magic), of another
  // version, truncated or inconsistent. The payload is not read: see verify().
  static std::shared_ptr<const MlmShard> open(const std::string& path);
  ~MlmShard();
  MlmShard(const MlmShard&) = delete;
  MlmShard& operator=(const MlmShard&) = delete;

  const std::string& path() const { return path_; }
  const MlmVocabInfo& vocab() const { return vocab_; }
  uint64_t num_documents() const { return num_docs_; }
  uint64_t num_segments() const { return num_segs_; }
  uint64_t num_tokens() const { return num_tokens_; }
  // Document d holds segments [doc_begin(d), doc_begin(d + 1)); segment s holds tokens
  // [seg_begin(s), seg_begin(s + 1)). d <= D and s <= S (the end entries are valid).
  uint64_t doc_begin(uint64_t d) const { return doc_index_[d]; }
  uint64_t seg_begin(uint64_t s) const { return seg_index_[s]; }
  // The document that holds segment s.
  uint64_t document_of_segment(uint64_t s) const;
  int32_t token(uint64_t i) const {
    return wide_ ? static_cast<const int32_t*>(tokens_)[i]
                 : static_cast<int32_t>(static_cast<const uint16_t*>(tokens_)[i]);
  }
  // Copies tokens [begin, end) to out.
  void copy_tokens(uint64_t begin, uint64_t end, int32_t* out) const;
  // Reads the whole file: payload checksum and every id < vocab_size. IoError naming the file
  // (and, for a bad id, the token, segment and document). About 0.1 s per 16.8M-token shard.
  void verify() const;

 private:
  MlmShard() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  MlmVocabInfo vocab_;
  uint64_t num_docs_ = 0, num_segs_ = 0, num_tokens_ = 0;
  const uint64_t* doc_index_ = nullptr;
  const uint64_t* seg_index_ = nullptr;
  const void* tokens_ = nullptr;
  bool wide_ = false;
  uint64_t payload_hash_ = 0;
};

// Which shards MlmCorpus::open reads whole to verify: shard i when i % parts == part; every one
// by default, none with parts 0. The trainer gives each rank its share, so that the ranks
// together read a corpus once (64 ranks each reading all of BERT-Large's shards at startup read
// it 64 times), and a corrupt shard still stops every rank before step 1.
struct ShardVerification {
  int part = 0, parts = 1;
  static ShardVerification none() { return {0, 0}; }
  bool covers(size_t shard) const {
    return parts > 0 && static_cast<int>(shard % static_cast<size_t>(parts)) == part;
  }
};

// Several shards as one corpus: documents and segments numbered across shards in the order the
// shards are given. All shards must share one vocabulary (size, hash and special ids).
class MlmCorpus {
 public:
  // Each path is a shard file or a folder, whose *.mlm files are taken in name order. IoError if
  // a path does not exist, a folder holds no shard, a shard is bad, or vocabularies differ.
  // `verify`: also MlmShard::verify() those shards (payload checksums, ids inside the
  // vocabulary), so corrupt data stops the run at open, not when a batch draws it.
  static MlmCorpus open(const std::vector<std::string>& paths, ShardVerification verify = {});
  explicit MlmCorpus(std::vector<std::shared_ptr<const MlmShard>> shards);

  const std::vector<std::shared_ptr<const MlmShard>>& shards() const { return shards_; }
  const MlmVocabInfo& vocab() const { return shards_.front()->vocab(); }
  uint64_t num_documents() const { return doc_start_.back(); }
  uint64_t num_segments() const { return seg_start_.back(); }
  uint64_t num_tokens() const { return tok_start_.back(); }
  // Global numbering: shard k holds documents [doc_start(k), doc_start(k + 1)), likewise for
  // segments and tokens.
  uint64_t doc_start(size_t k) const { return doc_start_[k]; }
  uint64_t seg_start(size_t k) const { return seg_start_[k]; }
  // The shard holding global segment s, and s's index inside it.
  size_t shard_of_segment(uint64_t s, uint64_t* local) const;
  size_t shard_of_document(uint64_t d, uint64_t* local) const;
  // Global segment range of global document d.
  uint64_t doc_first_segment(uint64_t d) const;
  uint64_t doc_end_segment(uint64_t d) const;
  uint64_t document_of_segment(uint64_t s) const;
  // Tokens of global segment s.
  uint64_t segment_length(uint64_t s) const;
  void copy_segment(uint64_t s, uint64_t from, uint64_t count, int32_t* out) const;
  // "3 shards (data/mlm): 233 documents, 91,000 segments, 2,100,000 tokens".
  std::string describe() const;

 private:
  std::vector<std::shared_ptr<const MlmShard>> shards_;
  std::vector<uint64_t> doc_start_{0}, seg_start_{0}, tok_start_{0};
};

}  // namespace ada::data

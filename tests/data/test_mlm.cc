// MLM shards (round trip, u16/u32 ids, atomic write, every bad-file case), MlmCorpus, the
// MlmDataset (layout, special tokens, 15% masking with the 80/10/10 split, labels only where
// chosen, determinism per (seed, epoch, index), fresh masks per epoch, NSP pairs), its
// validation split (whole documents held out), and the prepare_mlm program.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "data/held_out.h"
#include "data/mlm_dataset.h"
#include "data/mlm_shards.h"
#include "data_test_util.h"

namespace ada::data {
namespace {

using testing::expect_error;
using testing::TempDir;
namespace fs = std::filesystem;

const std::string kTinyVocab = std::string(ADA_TEST_DATA_DIR) + "/data/bert/tiny_vocab.txt";

// A synthetic vocabulary: ids 0..4 are [PAD] [UNK] [CLS] [SEP] [MASK]; content ids from 10 up.
MlmVocabInfo synthetic_vocab(uint32_t size = 60000) {
  MlmVocabInfo v;
  v.vocab_size = size;
  v.vocab_hash = 0x1234;
  v.special = {0, 1, 2, 3, 4};
  return v;
}

// docs[d][s] = token ids of segment s of document d.
using Docs = std::vector<std::vector<std::vector<int32_t>>>;

void write_shard(const std::string& path, const Docs& docs, MlmVocabInfo v = synthetic_vocab()) {
  MlmShardWriter w(path, v);
  for (const auto& d : docs) {
    for (const auto& s : d) w.add_segment(s);
    w.end_document();
  }
  w.finish();
}

// Documents whose every token is unique: token = 10 + running index. owner[token] = document.
Docs unique_docs(int ndocs, int min_segs, int max_segs, std::map<int32_t, int>* owner,
                 uint64_t salt = 0) {
  Docs docs;
  int32_t next = 10;
  uint64_t h = 0x9E3779B97F4A7C15ull ^ salt;
  auto rnd = [&](int lo, int hi) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    return lo + static_cast<int>((h >> 33) % static_cast<uint64_t>(hi - lo + 1));
  };
  for (int d = 0; d < ndocs; ++d) {
    docs.emplace_back();
    const int nseg = rnd(min_segs, max_segs);
    for (int s = 0; s < nseg; ++s) {
      docs.back().emplace_back();
      const int n = rnd(1, 25);
      for (int t = 0; t < n; ++t) {
        if (owner) (*owner)[next] = d;
        docs.back().back().push_back(next++);
      }
    }
  }
  return docs;
}

std::vector<uint8_t> slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void spit(const std::string& p, const std::vector<uint8_t>& b) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// ---- shards
// ---------------------------------------------------------------------------------------

TEST(MlmShards, RoundTripNarrowAndWide) {
  TempDir dir;
  for (uint32_t vocab_size : {5000u, 70000u}) {
    const std::string path = dir / ("s" + std::to_string(vocab_size) + ".mlm");
    Docs docs = {{{10, 11, 12}, {13}},
                 {{14, 15}},
                 {{static_cast<int32_t>(vocab_size - 1), 16}, {17}, {18, 19}}};
    MlmShardWriter w(path, synthetic_vocab(vocab_size));
    for (const auto& d : docs) {
      for (const auto& s : d) w.add_segment(s);
      w.add_segment({});  // ignored
      w.end_document();
      w.end_document();  // an empty document is never recorded
    }
    w.finish();
    EXPECT_EQ(w.num_documents(), 3u);
    auto shard = MlmShard::open(path);
    EXPECT_EQ(shard->vocab(), synthetic_vocab(vocab_size));
    ASSERT_EQ(shard->num_documents(), 3u);
    ASSERT_EQ(shard->num_segments(), 6u);
    ASSERT_EQ(shard->num_tokens(), 11u);
    uint64_t s = 0;
    for (uint64_t d = 0; d < docs.size(); ++d) {
      EXPECT_EQ(shard->doc_begin(d), s);
      for (const auto& seg : docs[d]) {
        std::vector<int32_t> got(seg.size());
        shard->copy_tokens(shard->seg_begin(s), shard->seg_begin(s + 1), got.data());
        EXPECT_EQ(got, seg);
        EXPECT_EQ(shard->document_of_segment(s), d);
        ++s;
      }
    }
    EXPECT_EQ(shard->token(6), static_cast<int32_t>(vocab_size - 1));
    EXPECT_NO_THROW(shard->verify());
    // Header + indices + 2- or 4-byte ids.
    EXPECT_EQ(fs::file_size(path), 128u + 8 * 4 + 8 * 7 + (vocab_size > 65536 ? 4 : 2) * 11);
  }
  // Atomic: no temporary files left; rewriting replaces the file.
  write_shard(dir / "s5000.mlm", {{{10}}});
  EXPECT_EQ(MlmShard::open(dir / "s5000.mlm")->num_tokens(), 1u);
  for (const auto& e : fs::directory_iterator(dir.str()))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  EXPECT_THROW(MlmShardWriter(dir / "x.mlm", synthetic_vocab()).add_segment({60000}),
               InternalError);
}

TEST(MlmShards, BadFilesAreIoErrorsNamingTheFile) {
  TempDir dir;
  const std::string good = dir / "good.mlm";
  write_shard(good, {{{10, 11, 12}, {13, 14}}, {{15}}});
  const auto bytes = slurp(good);
  auto variant = [&](const std::string& name, std::vector<uint8_t> b) {
    const std::string p = dir / name;
    spit(p, b);
    return p;
  };
  auto open = [](const std::string& p) { return [p] { MlmShard::open(p); }; };

  const std::string missing = dir / "missing.mlm";
  expect_error<IoError>(open(missing), {missing, "cannot open", "prepare_mlm"});
  const std::string tiny = variant("tiny.mlm", {bytes.begin(), bytes.begin() + 60});
  expect_error<IoError>(open(tiny), {tiny, "shorter than the 128-byte header"});
  auto b = bytes;
  b[0] = 'X';
  const std::string magic = variant("magic.mlm", b);
  expect_error<IoError>(open(magic), {magic, "bad magic"});
  b = bytes;
  b[60] ^= 0x40;  // a count: the header checksum catches it
  const std::string corrupt = variant("corrupt.mlm", b);
  expect_error<IoError>(open(corrupt), {corrupt, "header checksum"});
  b = bytes;
  b[8] = 2;  // version 2 with a valid checksum
  const uint64_t h = fnv1a64(b.data(), 120);
  std::memcpy(b.data() + 120, &h, 8);
  const std::string version = variant("version.mlm", b);
  expect_error<IoError>(open(version), {version, "format version 2"});
  const std::string cut = variant("cut.mlm", {bytes.begin(), bytes.end() - 3});
  expect_error<IoError>(open(cut), {cut, "truncated"});
  b = bytes;
  b.push_back(0);
  const std::string trailing = variant("trailing.mlm", b);
  expect_error<IoError>(open(trailing), {trailing, "trailing bytes"});
  b = bytes;
  b[b.size() - 1] ^= 0x01;  // a token id: open() accepts it, verify() finds it
  const std::string payload = variant("payload.mlm", b);
  auto shard = MlmShard::open(payload);
  expect_error<IoError>([&] { shard->verify(); }, {payload, "payload checksum"});
  b = bytes;
  const uint64_t bad_index = 7;  // first segment of document 1 beyond the segments
  std::memcpy(b.data() + 128 + 8, &bad_index, 8);
  uint64_t payload_hash = fnv1a64(b.data() + 128, b.size() - 128);
  std::memcpy(b.data() + 112, &payload_hash, 8);
  const uint64_t header_hash = fnv1a64(b.data(), 120);
  std::memcpy(b.data() + 120, &header_hash, 8);
  const std::string index = variant("index.mlm", b);
  expect_error<IoError>(open(index), {index, "index"});
}

// Rewrites the two checksums of a shard image after an edit (so only the edited field is wrong).
void fix_checksums(std::vector<uint8_t>& b) {
  const uint64_t payload = fnv1a64(b.data() + 128, b.size() - 128);
  std::memcpy(b.data() + 112, &payload, 8);
  const uint64_t header = fnv1a64(b.data(), 120);
  std::memcpy(b.data() + 120, &header, 8);
}

// Found by fuzz_mlm_shard: open() never read the payload and nothing called verify(), so a
// corrupt id reached the model's embedding lookup. MlmCorpus::open verifies every shard now.
TEST(MlmShards, CorpusOpenVerifiesEveryShard) {
  TempDir dir;
  fs::create_directories(dir / "c");
  write_shard(dir / "c/a.mlm", {{{10, 11}}});
  write_shard(dir / "c/b.mlm", {{{10, 11, 12}, {13, 14}}, {{15}}});
  auto b = slurp(dir / "c/b.mlm");
  b[b.size() - 1] ^= 0x01;  // the last token id; the checksum no longer matches
  spit(dir / "c/b.mlm", b);
  const std::string bad = dir / "c/b.mlm";
  expect_error<IoError>([&] { MlmCorpus::open({dir / "c"}); },
                        {bad, "payload checksum", "prepare_mlm"});
  expect_error<IoError>([&] { MlmDataset::open({dir / "c"}, MlmOptions{}); },
                        {bad, "payload checksum"});
  EXPECT_NO_THROW(MlmCorpus::open({dir / "c"}, ShardVerification::none()));  // headers are fine
  // Shared among ranks: b.mlm (shard 1) is rank 1's of 2 to verify, or rank 0's of 1.
  EXPECT_NO_THROW(MlmCorpus::open({dir / "c"}, {0, 2}));
  expect_error<IoError>([&] { MlmCorpus::open({dir / "c"}, {1, 2}); }, {bad, "payload checksum"});
  EXPECT_NO_THROW(MlmCorpus::open({dir / "c"}, {0, 3}));
  expect_error<IoError>([&] { MlmCorpus::open({dir / "c"}, {1, 3}); }, {bad, "payload checksum"});
  // An id outside the vocabulary with matching checksums: named with its segment and document.
  std::vector<uint8_t> good = slurp(dir / "c/a.mlm");
  write_shard(bad, {{{10, 11, 12}, {13, 14}}, {{15}}});
  b = slurp(bad);
  const uint16_t big = 60000;                         // vocabulary 60000: ids 0..59999
  std::memcpy(b.data() + b.size() - 2 * 3, &big, 2);  // token 3: segment 1 of document 0
  fix_checksums(b);
  spit(bad, b);
  expect_error<IoError>(
      [&] { MlmCorpus::open({bad}); },
      {bad, "token 3 (segment 1 of document 0) has id 60000", "outside the vocabulary of 60000"});
  // A wide shard with a negative id.
  write_shard(dir / "w.mlm", {{{10}, {11, 12}}}, synthetic_vocab(70000));
  b = slurp(dir / "w.mlm");
  const int32_t neg = -5;
  std::memcpy(b.data() + b.size() - 4, &neg, 4);
  fix_checksums(b);
  spit(dir / "w.mlm", b);
  expect_error<IoError>([&] { MlmCorpus::open({dir / "w.mlm"}); },
                        {"token 2 (segment 1 of document 0) has id -5"});
}

// The data audit of stop 83: a shard listed twice (the same folder twice, or through another
// path) would count its documents twice.
TEST(MlmShards, AShardListedTwiceIsRefused) {
  TempDir dir;
  fs::create_directories(dir / "c");
  write_shard(dir / "c/a.mlm", {{{10, 11}}});
  expect_error<IoError>(
      [&] {
        MlmCorpus::open({dir / "c", dir / "c"});
      },
      {dir / "c/a.mlm", "is listed twice", "list each shard or folder once"});
  expect_error<IoError>(
      [&] {
        MlmCorpus::open({dir / "c", dir / "c/../c/a.mlm"});
      },
      {"is listed twice"});
  EXPECT_NO_THROW(MlmCorpus::open({dir / "c"}));
}

TEST(MlmShards, VocabularySizeAndSpecialIdsAreCheckedAtOpen) {
  TempDir dir;
  // Ids are int32: a vocabulary of 2^31 or more turned negative in the dataset and its random
  // replacement ids left the vocabulary (found by fuzz_mlm_shard).
  write_shard(dir / "huge.mlm", {{{10, 11}}}, synthetic_vocab(0x80000000u));
  expect_error<IoError>([&] { MlmShard::open(dir / "huge.mlm"); },
                        {dir / "huge.mlm", "inconsistent header", "vocabulary size"});
  MlmVocabInfo v = synthetic_vocab(100);
  v.special.mask = 100;  // one past the end
  write_shard(dir / "s.mlm", {{{10, 11}}}, v);
  expect_error<IoError>([&] { MlmShard::open(dir / "s.mlm"); },
                        {dir / "s.mlm", "the id of [MASK] is 100, outside the vocabulary of 100"});
  v = synthetic_vocab(100);
  v.special.cls = -7;
  write_shard(dir / "n.mlm", {{{10, 11}}}, v);
  expect_error<IoError>([&] { MlmShard::open(dir / "n.mlm"); }, {"the id of [CLS] is -7"});
}

TEST(MlmShards, CorpusNumbersShardsGlobally) {
  TempDir dir;
  fs::create_directories(dir / "shards");
  write_shard(dir / "shards/b-1.mlm", {{{20, 21}}, {{22}, {23, 24}}});
  write_shard(dir / "shards/a-0.mlm", {{{10}, {11, 12}, {13}}});
  const MlmCorpus c = MlmCorpus::open({dir / "shards"});
  ASSERT_EQ(c.shards().size(), 2u);
  EXPECT_EQ(c.shards()[0]->path(), dir / "shards/a-0.mlm");  // name order
  EXPECT_EQ(c.num_documents(), 3u);
  EXPECT_EQ(c.num_segments(), 6u);
  EXPECT_EQ(c.num_tokens(), 9u);
  EXPECT_EQ(c.doc_first_segment(1), 3u);
  EXPECT_EQ(c.doc_end_segment(2), 6u);
  EXPECT_EQ(c.document_of_segment(4), 2u);
  EXPECT_EQ(c.segment_length(5), 2u);
  int32_t t[2];
  c.copy_segment(5, 0, 2, t);
  EXPECT_EQ(t[0], 23);
  EXPECT_EQ(t[1], 24);
  EXPECT_NE(c.describe().find("2 shards"), std::string::npos) << c.describe();

  write_shard(dir / "other.mlm", {{{10}}}, synthetic_vocab(6000));
  expect_error<IoError>(
      [&] {
        MlmCorpus::open({dir / "shards/a-0.mlm", dir / "other.mlm"});
      },
      {dir / "other.mlm", dir / "shards/a-0.mlm", "another vocabulary"});
  fs::create_directories(dir / "empty");
  expect_error<IoError>([&] { MlmCorpus::open({dir / "empty"}); }, {dir / "empty", "no *.mlm"});
  expect_error<IoError>([&] { MlmCorpus::open({dir / "nothing"}); },
                        {dir / "nothing", "does not exist"});
}

// ---- dataset
// --------------------------------------------------------------------------------------

std::vector<int64_t> field(const Example& ex, const std::string& name) {
  return ex.at(name).to_vector<int64_t>();
}

TEST(MlmDataset, PackedLayoutAndStream) {
  TempDir dir;
  std::map<int32_t, int> owner;
  const Docs docs = unique_docs(7, 1, 12, &owner);
  write_shard(dir / "c-0.mlm", {docs.begin(), docs.begin() + 4});
  write_shard(dir / "c-1.mlm", {docs.begin() + 4, docs.end()});
  // The expected stream: documents joined by [SEP].
  std::vector<int32_t> stream;
  for (size_t d = 0; d < docs.size(); ++d) {
    if (d) stream.push_back(3);
    for (const auto& s : docs[d]) stream.insert(stream.end(), s.begin(), s.end());
  }
  MlmOptions opt;
  opt.seq_len = 32;
  auto ds = MlmDataset::open({dir.str() + "/c-0.mlm", dir.str() + "/c-1.mlm"}, opt);
  const int64_t body = 30;
  ASSERT_EQ(ds->size(), static_cast<int64_t>((stream.size() + body - 1) / body));
  std::vector<int32_t> rebuilt;
  for (int64_t i = 0; i < ds->size(); ++i) {
    const auto seq = ds->sequence(i, 0);
    ASSERT_EQ(seq.ids.size(), 32u);
    EXPECT_EQ(seq.ids[0], 2);
    EXPECT_EQ(seq.ids[static_cast<size_t>(seq.length - 1)], 3);
    for (size_t k = static_cast<size_t>(seq.length); k < 32; ++k) EXPECT_EQ(seq.ids[k], 0);
    if (i + 1 < ds->size()) {
      EXPECT_EQ(seq.length, 32);
    }
    rebuilt.insert(rebuilt.end(), seq.ids.begin() + 1, seq.ids.begin() + seq.length - 1);
    for (int32_t s : seq.segment_ids) EXPECT_EQ(s, 0);
  }
  EXPECT_EQ(rebuilt, stream);
  const Example ex = ds->get(ds->size() - 1, 0);
  const auto seq = ds->sequence(ds->size() - 1, 0);
  const auto att = field(ex, "attention_mask");
  for (int64_t k = 0; k < 32; ++k) EXPECT_EQ(att[static_cast<size_t>(k)], k < seq.length ? 1 : 0);
  EXPECT_FALSE(ex.has("nsp_label"));
  EXPECT_EQ(ex.at("input_ids").dtype(), DType::i64);
  EXPECT_EQ(ex.at("labels").shape(), Shape({32}));
}

struct MaskStats {
  int64_t content = 0, chosen = 0, masked = 0, random = 0, kept = 0;
};

// Checks one example against its unmasked sequence; accumulates the masking statistics.
void check_masking(const MlmDataset& ds, int64_t index, int64_t epoch, MaskStats& st) {
  const auto seq = ds.sequence(index, epoch);
  const Example ex = ds.get(index, epoch);
  const auto ids = field(ex, "input_ids"), labels = field(ex, "labels");
  const auto seg = field(ex, "segment_ids");
  int64_t content = 0, chosen = 0;
  for (size_t k = 0; k < ids.size(); ++k) {
    EXPECT_EQ(seg[k], seq.segment_ids[k]);
    if (!seq.content[k]) {  // [CLS] / [SEP] / [PAD]: never touched
      EXPECT_EQ(ids[k], seq.ids[k]) << "position " << k;
      EXPECT_EQ(labels[k], -100) << "position " << k;
      continue;
    }
    ++content;
    if (labels[k] == -100) {
      EXPECT_EQ(ids[k], seq.ids[k]) << "unchosen position " << k << " changed";
      continue;
    }
    ++chosen;
    EXPECT_EQ(labels[k], seq.ids[k]) << "label is not the original token";
    if (ids[k] == 4)
      ++st.masked;
    else if (ids[k] == seq.ids[k])
      ++st.kept;
    else
      ++st.random;
    EXPECT_GE(ids[k], 0);
    EXPECT_LT(ids[k], 60000);
  }
  int64_t want = content == 0 ? 0 : std::max<int64_t>(1, std::llround(0.15 * content));
  if (ds.options().max_predictions > 0) want = std::min(want, ds.options().max_predictions);
  EXPECT_EQ(chosen, want);
  // mlm_positions / mlm_labels: the chosen positions in ascending order with their labels, then
  // position 0 labelled -100 up to the dataset's one count.
  const auto positions = field(ex, "mlm_positions"), chosen_labels = field(ex, "mlm_labels");
  std::vector<int64_t> want_positions, want_labels;
  for (size_t k = 0; k < labels.size(); ++k)
    if (labels[k] != -100) {
      want_positions.push_back(static_cast<int64_t>(k));
      want_labels.push_back(labels[k]);
    }
  const auto per = static_cast<size_t>(ds.predictions_per_example());
  ASSERT_LE(want_positions.size(), per);
  want_positions.resize(per, 0);
  want_labels.resize(per, -100);
  EXPECT_EQ(positions, want_positions);
  EXPECT_EQ(chosen_labels, want_labels);
  st.content += content;
  st.chosen += chosen;
}

TEST(MlmDataset, MaskingRatiosLabelsAndDeterminism) {
  TempDir dir;
  write_shard(dir / "c.mlm", unique_docs(40, 5, 30, nullptr));
  MlmOptions opt;
  opt.seq_len = 64;
  opt.seed = 7;
  auto ds = MlmDataset::open({dir / "c.mlm"}, opt);
  ASSERT_GT(ds->size(), 100);
  EXPECT_EQ(ds->predictions_per_example(), 9);  // round(0.15 x 62 content tokens at most)
  MaskStats st;
  for (int64_t epoch = 0; epoch < 3; ++epoch)
    for (int64_t i = 0; i < ds->size(); ++i) check_masking(*ds, i, epoch, st);
  const double ratio = double(st.chosen) / double(st.content);
  EXPECT_NEAR(ratio, 0.15, 0.005);
  EXPECT_GT(st.chosen, 3000);
  EXPECT_NEAR(double(st.masked) / double(st.chosen), 0.8, 0.02);
  EXPECT_NEAR(double(st.random) / double(st.chosen), 0.1, 0.015);
  EXPECT_NEAR(double(st.kept) / double(st.chosen), 0.1, 0.015);

  // Same (seed, epoch, index) -> same example, from another object too; other epochs and seeds
  // mask differently.
  auto again = MlmDataset::open({dir / "c.mlm"}, opt);
  MlmOptions other_seed = opt;
  other_seed.seed = 8;
  auto reseeded = MlmDataset::open({dir / "c.mlm"}, other_seed);
  int same_epoch_diff = 0, other_epoch_diff = 0, other_seed_diff = 0;
  for (int64_t i = 0; i < 50; ++i) {
    const auto a = field(ds->get(i, 1), "input_ids");
    EXPECT_EQ(a, field(ds->get(i, 1), "input_ids"));
    EXPECT_EQ(field(ds->get(i, 1), "labels"), field(again->get(i, 1), "labels"));
    same_epoch_diff += a != field(again->get(i, 1), "input_ids");
    other_epoch_diff += field(ds->get(i, 1), "labels") != field(ds->get(i, 2), "labels");
    other_seed_diff += field(ds->get(i, 1), "labels") != field(reseeded->get(i, 1), "labels");
  }
  EXPECT_EQ(same_epoch_diff, 0);
  EXPECT_GE(other_epoch_diff, 48);
  EXPECT_GE(other_seed_diff, 48);

  // max_predictions caps the chosen positions; mask_prob 0 chooses none.
  MlmOptions capped = opt;
  capped.max_predictions = 2;
  auto cap = MlmDataset::open({dir / "c.mlm"}, capped);
  EXPECT_EQ(cap->predictions_per_example(), 2);
  MaskStats unused;
  for (int64_t i = 0; i < 20; ++i) {
    check_masking(*cap, i, 0, unused);
    int n = 0;
    for (int64_t l : field(cap->get(i, 0), "labels")) n += l != -100;
    EXPECT_EQ(n, 2);
  }
  MlmOptions none = opt;
  none.mask_prob = 0;
  const Example unmasked = MlmDataset::open({dir / "c.mlm"}, none)->get(0, 0);
  for (int64_t l : field(unmasked, "labels")) EXPECT_EQ(l, -100);
  EXPECT_EQ(unmasked.at("mlm_positions").shape(), Shape({0}));
}

TEST(MlmDataset, NspPairs) {
  TempDir dir;
  std::map<int32_t, int> owner;
  write_shard(dir / "c.mlm", unique_docs(30, 2, 40, &owner));
  MlmOptions opt;
  opt.seq_len = 48;
  opt.nsp = true;
  opt.seed = 3;
  auto ds = MlmDataset::open({dir / "c.mlm"}, opt);
  ASSERT_GT(ds->size(), 100);
  EXPECT_EQ(ds->predictions_per_example(), 7);  // round(0.15 x 45): [CLS] and two [SEP]s
  int64_t random = 0, total = 0;
  MaskStats st;
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    for (int64_t i = 0; i < ds->size(); ++i) {
      const auto seq = ds->sequence(i, epoch);
      ASSERT_TRUE(seq.nsp_label == 0 || seq.nsp_label == 1);
      // [CLS] A [SEP] B [SEP] [PAD]...; segment ids 0 up to the first [SEP], 1 up to the second.
      ASSERT_EQ(seq.ids[0], 2);
      size_t sep1 = 1;
      while (seq.ids[sep1] != 3) ++sep1;
      const size_t sep2 = static_cast<size_t>(seq.length - 1);
      ASSERT_EQ(seq.ids[sep2], 3);
      ASSERT_GT(sep1, 1u) << "A is empty";
      ASSERT_GT(sep2, sep1 + 1) << "B is empty";
      for (size_t k = 0; k < seq.ids.size(); ++k) {
        EXPECT_EQ(seq.segment_ids[k], k > sep1 && k <= sep2 ? 1 : 0);
        if (k > sep2) {
          EXPECT_EQ(seq.ids[k], 0);
        }
      }
      EXPECT_LE(seq.length, 48);
      const int doc_a = owner.at(seq.ids[1]);
      const int doc_b = owner.at(seq.ids[sep1 + 1]);
      for (size_t k = 1; k < sep1; ++k) EXPECT_EQ(owner.at(seq.ids[k]), doc_a);
      if (seq.nsp_label == 0) {  // B continues A in the same document
        EXPECT_EQ(doc_b, doc_a);
        EXPECT_GT(seq.ids[sep1 + 1], seq.ids[sep1 - 1]);
      } else {
        EXPECT_NE(doc_b, doc_a);
      }
      random += seq.nsp_label;
      ++total;
      const Example ex = ds->get(i, epoch);
      EXPECT_EQ(ex.at("nsp_label").shape(), Shape({}));
      EXPECT_EQ(ex.at("nsp_label").to_vector<int64_t>()[0], seq.nsp_label);
      if (i < 100) check_masking(*ds, i, epoch, st);
    }
  }
  EXPECT_NEAR(double(random) / double(total), 0.5, 0.03);
  EXPECT_NEAR(double(st.chosen) / double(st.content), 0.15, 0.01);

  // Examples stack into a batch as the loader does it.
  std::vector<Example> exs = {ds->get(0, 0), ds->get(1, 0), ds->get(2, 0)};
  const Batch b = stack_examples(exs, {0, 1, 2});
  EXPECT_EQ(b.at("input_ids").shape(), Shape({3, 48}));
  EXPECT_EQ(b.at("nsp_label").shape(), Shape({3}));
  EXPECT_EQ(b.at("mlm_positions").shape(), Shape({3, 7}));
  EXPECT_EQ(b.at("mlm_labels").shape(), Shape({3, 7}));
}

TEST(MlmDataset, OneDocumentCorpusAndBadOptions) {
  TempDir dir;
  write_shard(dir / "one.mlm", {{{10, 11, 12, 13}, {14, 15}, {16}, {17, 18, 19}}});
  MlmOptions opt;
  opt.seq_len = 8;
  opt.nsp = true;
  auto ds = MlmDataset::open({dir / "one.mlm"}, opt);
  for (int64_t e = 0; e < 20; ++e)
    for (int64_t i = 0; i < ds->size(); ++i) {
      const auto seq = ds->sequence(i, e);
      EXPECT_LE(seq.length, 8);
      EXPECT_EQ(seq.ids[0], 2);
    }
  // A single segment of a single document: B is the rest of that segment, always "is next".
  write_shard(dir / "single.mlm", {{{10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}}});
  auto single = MlmDataset::open({dir / "single.mlm"}, opt);
  ASSERT_EQ(single->size(), 1);
  for (int64_t e = 0; e < 10; ++e) EXPECT_EQ(single->sequence(0, e).nsp_label, 0);

  MlmOptions bad = opt;
  bad.seq_len = 4;
  expect_error<ConfigError>([&] { MlmDataset::open({dir / "one.mlm"}, bad); }, {"seq_len 4"});
  bad = opt;
  bad.mask_token_prob = 0.95;
  expect_error<ConfigError>([&] { MlmDataset::open({dir / "one.mlm"}, bad); }, {"mask_token_prob"});
  MlmVocabInfo nomask = synthetic_vocab();
  nomask.special.mask = -1;
  write_shard(dir / "nomask.mlm", {{{10}}}, nomask);
  expect_error<IoError>([&] { MlmDataset::open({dir / "nomask.mlm"}, opt); },
                        {dir / "nomask.mlm", "[MASK]"});
  write_shard(dir / "empty.mlm", {});
  expect_error<IoError>([&] { MlmDataset::open({dir / "empty.mlm"}, opt); },
                        {dir / "empty.mlm", "no tokens"});
  EXPECT_THROW(ds->get(ds->size(), 0), ShapeError);
}

// data.validation_size on MLM shards: the last N sequences are the validation set, and training
// stops where the document of the first of them starts, so no document is in both sets.
TEST(MlmDataset, ValidationHoldsOutWholeDocuments) {
  TempDir dir;
  std::map<int32_t, int> owner;
  write_shard(dir / "c.mlm", unique_docs(40, 2, 12, &owner));
  auto read = [&](const std::string& extra) {
    Config root = Config::parse("{data: {name: mlm, path: " + (dir / "c.mlm") + ", seq_len: 16" +
                                    extra + "}, model: {name: bert, vocab_size: 60000}}",
                                "m.yaml");
    return read_datasets(builtin_datasets(), {root.child("data"), root.child("model"), 0, 1});
  };
  MlmOptions opt;
  opt.seq_len = 16;
  opt.vocab_size = 60000;
  opt.seed = 1;  // train.seed, as read_datasets is given it below
  const auto full = MlmDataset::open({dir / "c.mlm"}, opt);
  const int64_t n_val = 10;
  const DataSets sets = read(", validation_size: " + std::to_string(n_val));
  ASSERT_TRUE(sets.validation);
  EXPECT_EQ(sets.validation->size(), n_val);
  const int64_t train_end = full->first_example_of_document_at(full->size() - n_val);
  EXPECT_EQ(sets.train->size(), train_end);
  EXPECT_LT(train_end, full->size() - n_val) << "the test wants a document cut by the split";
  auto docs_of = [&](const Dataset& set) {
    const auto& sub = dynamic_cast<const SubsetDataset&>(set);
    std::set<int> docs;
    for (int64_t i = 0; i < sub.size(); ++i) {
      const auto seq = full->sequence(sub.base_index(i), 0);
      for (int64_t k = 0; k < seq.length; ++k)
        if (seq.content[static_cast<size_t>(k)])
          docs.insert(owner.at(seq.ids[static_cast<size_t>(k)]));
    }
    return docs;
  };
  const std::set<int> trained = docs_of(*sets.train), held = docs_of(*sets.validation);
  EXPECT_FALSE(trained.empty());
  EXPECT_FALSE(held.empty());
  for (int d : held) EXPECT_EQ(trained.count(d), 0u) << "document " << d << " is in both sets";
  // The validation examples are the last ones, masked as the full set masks them in epoch 0.
  for (int64_t i = 0; i < n_val; ++i)
    EXPECT_EQ(field(sets.validation->get(i, 0), "input_ids"),
              field(full->get(full->size() - n_val + i, 0), "input_ids"));
  // NSP draws random next sentences from any document: refused, naming the key.
  expect_error<ConfigError>(
      [&] {
        Config root = Config::parse("{data: {name: mlm, path: " + (dir / "c.mlm") +
                                        ", seq_len: 16, validation_size: 4}, model: {name: bert, "
                                        "vocab_size: 60000, nsp: true}}",
                                    "m.yaml");
        read_datasets(builtin_datasets(), {root.child("data"), root.child("model"), 0, 1});
      },
      {"data.validation_size (line 1, column", "model.nsp"});
  // A one-document corpus has no whole document left to train on.
  write_shard(dir / "one.mlm", {{{10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
                                  22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33}}});
  expect_error<ConfigError>(
      [&] {
        Config root = Config::parse("{data: {name: mlm, path: " + (dir / "one.mlm") +
                                        ", seq_len: 16, validation_size: 1}, model: {name: bert, "
                                        "vocab_size: 60000}}",
                                    "m.yaml");
        read_datasets(builtin_datasets(), {root.child("data"), root.child("model"), 0, 1});
      },
      {"data.validation_size", "no whole document is left to train on"});
}

// The shards' vocabulary must be the model's: a larger one would index past the embedding table.
TEST(MlmDataset, VocabularySizeMustMatchTheModel) {
  TempDir dir;
  write_shard(dir / "v.mlm", {{{10, 11, 12}}}, synthetic_vocab(5000));
  MlmOptions opt;
  opt.seq_len = 8;
  opt.vocab_size = 30522;
  expect_error<IoError>([&] { MlmDataset::open({dir / "v.mlm"}, opt); },
                        {dir / "v.mlm", "vocabulary of 5000 tokens but the model's has 30522",
                         "set model.vocab_size: 5000", "prepare_mlm"});
  opt.vocab_size = 5000;
  EXPECT_NO_THROW(MlmDataset::open({dir / "v.mlm"}, opt));
  opt.vocab_size = 0;  // not checked
  EXPECT_NO_THROW(MlmDataset::open({dir / "v.mlm"}, opt));
  opt.vocab_size = -1;
  expect_error<ConfigError>([&] { MlmDataset::open({dir / "v.mlm"}, opt); }, {"vocab_size -1"});
}

// Evaluation shards made with another vocabulary of the same size and special ids: their ids
// would mean other words (the data audit of stop 83 found them evaluated silently).
TEST(MlmDataset, EvaluationShardsMustShareTheTrainingVocabulary) {
  TempDir dir;
  fs::create_directories(dir / "train");
  fs::create_directories(dir / "eval");
  MlmVocabInfo other = synthetic_vocab(100);
  other.vocab_hash ^= 1;
  write_shard(dir / "train/a.mlm", {{{10, 11, 12}}}, synthetic_vocab(100));
  write_shard(dir / "eval/a.mlm", {{{10, 11, 12}}}, other);
  const Config root = Config::parse(
      "model: {name: bert, vocab_size: 100, max_positions: 16}\n"
      "data: {name: mlm, seq_len: 8, path: " +
          dir / "train" + ", eval_path: " + dir / "eval" + "}\n",
      "m.yaml");
  expect_error<IoError>(
      [&] {
        read_datasets(builtin_datasets(), {root.child("data"), root.child("model"), 0, 1});
      },
      {"data.eval_path", dir / "eval/a.mlm", "another vocabulary than the training shard",
       "one vocab.txt"});
  write_shard(dir / "eval/a.mlm", {{{10, 11, 12}}}, synthetic_vocab(100));
  EXPECT_NO_THROW(
      read_datasets(builtin_datasets(), {root.child("data"), root.child("model"), 0, 1}));
}

// ---- the prepare_mlm program
// ----------------------------------------------------------------------

std::pair<int, std::string> run(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return {-1, ""};
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(PrepareMlm, DocumentRulesAndShards) {
  const std::string bin =
      fs::read_symlink("/proc/self/exe").parent_path().string() + "/prepare_mlm";
  ASSERT_TRUE(fs::exists(bin)) << bin << " not built (cmake --build --target prepare_mlm)";
  TempDir dir;
  fs::create_directories(dir / "corpus/sub");
  std::ofstream(dir / "corpus/a.txt")
      << "Hello world.\nThe quick brown fox.\n\n  \nA new document!\n"
         "\x01\x02\n\nthird doc";
  std::ofstream(dir / "corpus/sub/b.txt") << "\n\nunaffable\n";
  std::ofstream(dir / "corpus/.hidden.txt") << "never read\n";
  std::ofstream(dir / "corpus/notes.md") << "skipped by --ext\n";
  const Tokenizer tok = Tokenizer::from_file(kTinyVocab);

  // One document per file, tiny shards (a new one after every document).
  auto [rc2, out2] = run("'" + bin + "' --vocab '" + kTinyVocab + "' --out '" + (dir / "out") +
                         "' --docs file --shard-tokens 1 --prefix shard --ext .txt '" +
                         (dir / "corpus/a.txt") + "' '" + (dir / "corpus/sub/b.txt") + "'");
  ASSERT_EQ(rc2, 0) << out2;
  EXPECT_TRUE(fs::exists(dir / "out/shard-00001.mlm"));
  const MlmCorpus c2 = MlmCorpus::open({dir / "out"});
  EXPECT_EQ(c2.shards().size(), 2u);
  EXPECT_EQ(c2.num_documents(), 2u);
  EXPECT_EQ(c2.num_segments(), 5u);

  // Blank-line rule, one shard: the rerun removes the stale shard-00001.mlm.
  auto [rc, out] = run("'" + bin + "' --vocab '" + kTinyVocab + "' --out '" + (dir / "out") +
                       "' --ext .txt --verify '" + (dir / "corpus") + "'");
  ASSERT_EQ(rc, 0) << out;
  const MlmCorpus c = MlmCorpus::open({dir / "out"});
  EXPECT_EQ(c.vocab(), MlmVocabInfo::of(tok));
  // a.txt: {Hello world. / The quick brown fox.}, {A new document!}, {third doc}; b.txt:
  // {unaffable}.
  ASSERT_EQ(c.num_documents(), 4u);
  ASSERT_EQ(c.num_segments(), 5u);
  const std::vector<std::string> lines = {"Hello world.", "The quick brown fox.", "A new document!",
                                          "third doc", "unaffable"};
  for (uint64_t s = 0; s < 5; ++s) {
    std::vector<int32_t> got(c.segment_length(s));
    c.copy_segment(s, 0, got.size(), got.data());
    EXPECT_EQ(got, tok.encode(lines[s])) << lines[s];
  }
  EXPECT_EQ(c.doc_end_segment(0), 2u);

  EXPECT_FALSE(fs::exists(dir / "out/shard-00001.mlm"));
  EXPECT_NE(out.find("removed stale shard"), std::string::npos) << out;

  auto [rc3, out3] = run("'" + bin + "' --vocab '" + (dir / "none.txt") + "' --out '" +
                         (dir / "o3") + "' '" + (dir / "corpus") + "'");
  EXPECT_EQ(rc3, 1);
  EXPECT_NE(out3.find(dir / "none.txt"), std::string::npos) << out3;
  auto [rc4, out4] = run("'" + bin + "' --vocab '" + kTinyVocab + "' --out '" + (dir / "o4") +
                         "' '" + (dir / "nowhere") + "'");
  EXPECT_EQ(rc4, 1);
  EXPECT_NE(out4.find(dir / "nowhere"), std::string::npos) << out4;
  // Latin-1 text (or a compressed file): the tokenizer would drop its bytes without a word.
  std::ofstream(dir / "latin1.txt") << "plain line\nna\xefve caf\xe9\n";
  auto [rc5, out5] = run("'" + bin + "' --vocab '" + kTinyVocab + "' --out '" + (dir / "o5") +
                         "' '" + (dir / "latin1.txt") + "'");
  EXPECT_EQ(rc5, 1);
  EXPECT_NE(out5.find("input " + (dir / "latin1.txt") + " line 2 is not UTF-8 text"),
            std::string::npos)
      << out5;
  // A file given twice (as itself and in its folder), and inputs with no text: refused, not
  // written twice or as an empty shard.
  auto [rc6, out6] = run("'" + bin + "' --vocab '" + kTinyVocab + "' --out '" + (dir / "o6") +
                         "' '" + (dir / "corpus/sub") + "' '" + (dir / "corpus/sub/b.txt") + "'");
  EXPECT_EQ(rc6, 1);
  EXPECT_NE(out6.find("is listed twice"), std::string::npos) << out6;
  std::ofstream(dir / "blank.txt") << "\n  \n";
  auto [rc7, out7] = run("'" + bin + "' --vocab '" + kTinyVocab + "' --out '" + (dir / "o7") +
                         "' '" + (dir / "blank.txt") + "'");
  EXPECT_EQ(rc7, 1);
  EXPECT_NE(out7.find("the inputs hold no text to tokenise"), std::string::npos) << out7;
  EXPECT_FALSE(fs::exists(dir / "o7/shard-00000.mlm"));
}

// The held-out evaluation set: a deterministic split by document, every (1/F)-th document in
// input order (k = 3, 6, 9 of 10 for F = 0.3), written to its own folder, disjoint from --out.
TEST(PrepareMlm, EvalSetIsEveryNthDocumentInItsOwnFolder) {
  const std::string bin =
      fs::read_symlink("/proc/self/exe").parent_path().string() + "/prepare_mlm";
  TempDir dir;
  fs::create_directories(dir / "corpus");
  for (int k = 0; k < 10; ++k) {  // document k: one line of k + 1 words "hello"
    std::ofstream f(dir / ("corpus/d" + std::to_string(k) + ".txt"));
    for (int i = 0; i <= k; ++i) f << "hello ";
    f << "\n";
  }
  const std::string base = "'" + bin + "' --vocab '" + kTinyVocab + "' --docs file ";
  const std::string in = " '" + (dir / "corpus") + "'";
  for (int round = 0; round < 2; ++round) {  // the same split on every run
    auto [rc, out] = run(base + "--out '" + (dir / "train") + "' --eval-out '" + (dir / "eval") +
                         "' --eval-fraction 0.3 --verify" + in);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("evaluation set (1 document in 3.33333): 1 shard(s)"), std::string::npos)
        << out;
    const MlmCorpus train = MlmCorpus::open({dir / "train"}),
                    eval = MlmCorpus::open({dir / "eval"});
    std::vector<uint64_t> train_lengths, eval_lengths;
    for (uint64_t s = 0; s < train.num_segments(); ++s)
      train_lengths.push_back(train.segment_length(s));
    for (uint64_t s = 0; s < eval.num_segments(); ++s)
      eval_lengths.push_back(eval.segment_length(s));
    EXPECT_EQ(eval_lengths, (std::vector<uint64_t>{4, 7, 10}));
    EXPECT_EQ(train_lengths, (std::vector<uint64_t>{1, 2, 3, 5, 6, 8, 9}));
    EXPECT_EQ(train.vocab(), eval.vocab());
  }
  // Misuse: named, and nothing trained on the evaluation set.
  auto [rc1, out1] = run(base + "--out '" + (dir / "a") + "' --eval-out '" + (dir / "a") +
                         "/' --eval-fraction 0.3" + in);
  EXPECT_EQ(rc1, 1);
  EXPECT_NE(out1.find("is the --out folder"), std::string::npos) << out1;
  auto [rc2, out2] = run(base + "--out '" + (dir / "a") + "' --eval-fraction 0.3" + in);
  EXPECT_EQ(rc2, 1);
  EXPECT_NE(out2.find("--eval-out and --eval-fraction go together"), std::string::npos) << out2;
  auto [rc3, out3] = run(base + "--out '" + (dir / "a") + "' --eval-out '" + (dir / "b") +
                         "' --eval-fraction 0.05" + in);
  EXPECT_EQ(rc3, 1);
  EXPECT_NE(out3.find("puts 0 of the 10 documents into the evaluation set"), std::string::npos)
      << out3;
  auto [rc4, out4] = run(base + "--out '" + (dir / "a") + "' --eval-out '" + (dir / "b") +
                         "' --eval-fraction 1" + in);
  EXPECT_EQ(rc4, 1);
  EXPECT_NE(out4.find("strictly between 0 and 1"), std::string::npos) << out4;
}

}  // namespace
}  // namespace ada::data

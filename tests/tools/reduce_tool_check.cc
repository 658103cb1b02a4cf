// Companion of the reduce_tool CTest: `write DIR P` writes rank{r}.safetensors inputs for P
// ranks (tensor "a": orthogonal across ranks, disjoint supports; tensor "b": parallel, rank r
// holds (r+1)*v; tensor "c": empty); `check REDUCER IN OUT P` verifies what reduce_tool wrote:
// every rank identical; sum: elementwise sums; adasum: a = sum (orthogonal), b = mean (parallel).
#include <cmath>
#include <filesystem>
#include <iostream>
#include <string>

#include "core/serialize.h"

using namespace ada;

static std::string file(const std::string& dir, int r) {
  return dir + "/rank" + std::to_string(r) + ".safetensors";
}

int main(int argc, char** argv) {
  try {
    std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "write" && argc == 4) {
      const int p = std::stoi(argv[3]);
      std::filesystem::create_directories(argv[2]);
      for (int r = 0; r < p; ++r) {
        Tensor a = Tensor::zeros({5, 3}), b = Tensor::empty({7});
        for (int i = 0; i < 15; ++i)
          if (i % p == r) a.data<float>()[i] = 0.5f + i;
        for (int i = 0; i < 7; ++i) b.data<float>()[i] = (r + 1) * (i - 3.f);
        save_safetensors(file(argv[2], r), {{"a", a}, {"b", b}, {"c", Tensor::zeros({0})}});
      }
      return 0;
    }
    if (mode == "check" && argc == 6) {
      const std::string reducer = argv[2];
      const int p = std::stoi(argv[5]);
      NamedTensors first = load_safetensors(file(argv[4], 0));
      for (int r = 1; r < p; ++r) {
        NamedTensors o = load_safetensors(file(argv[4], r));
        for (const char* n : {"a", "b"})
          if (o.at(n).to_vector<float>() != first.at(n).to_vector<float>())
            throw Error(std::string("rank ") + std::to_string(r) + " differs from rank 0 in " + n);
      }
      auto a = first.at("a").to_vector<float>(), b = first.at("b").to_vector<float>();
      if (first.at("a").shape() != Shape({5, 3}) || first.at("c").numel() != 0)
        throw Error("output shapes differ from the input's");
      double bscale = reducer == "sum" ? p * (p + 1) / 2.0 : (p + 1) / 2.0;
      for (int i = 0; i < 15; ++i)
        if (std::fabs(a[i] - (0.5 + i)) > 1e-5 * (1 + i))
          throw Error("a[" + std::to_string(i) + "] wrong");
      for (int i = 0; i < 7; ++i)
        if (std::fabs(b[i] - bscale * (i - 3)) > 1e-5 * (1 + std::fabs(bscale * (i - 3))))
          throw Error("b[" + std::to_string(i) + "] = " + std::to_string(b[i]) + ", want " +
                      std::to_string(bscale * (i - 3)));
      std::cout << "reduce_tool output verified (" << reducer << ", " << p << " ranks)\n";
      return 0;
    }
    std::cerr << "usage: reduce_tool_check write DIR P | check REDUCER IN OUT P\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "reduce_tool_check: " << e.what() << "\n";
    return 1;
  }
}

// describe_model: prints a model's modules and parameter counts without training it.
//   describe_model NAME [key=value ...]      e.g. describe_model bert preset=large nsp=true
// The keys are those of the config's model section (see configs/README.md once it exists).
// Weights are not initialised (shapes only), so paper-scale models describe instantly.
#include <iostream>
#include <string>

#include "core/config.h"
#include "nn/init.h"
#include "nn/model.h"

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help") {
    std::cerr << "usage: describe_model NAME [key=value ...]\n";
    return argc < 2 ? 2 : 0;
  }
  try {
    ada::nn::ModelRegistry registry("model");
    ada::nn::register_builtin_models(registry);
    ada::Config cfg = ada::Config::parse("name: " + std::string(argv[1]), "command line");
    for (int i = 2; i < argc; ++i) cfg.set_override(argv[i]);
    const auto& factory = registry.get(cfg.get<std::string>("name"), "model name");
    ada::nn::init::ShapesOnly shapes_only;
    auto model = factory(cfg, 0);
    cfg.finish();
    std::cout << model->describe();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "describe_model: " << e.what() << "\n";
    return 1;
  }
}

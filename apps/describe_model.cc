// describe_model: prints a model's modules and parameter counts without training it.
//   describe_model NAME [key=value ...]      e.g. describe_model bert preset=large nsp=true
// The keys are those of the config's model section (configs/README.md lists them).
// Weights are not initialised (shapes only), so paper-scale models describe instantly.
#include <iostream>
#include <string>

#include "apps/common/cli.h"
#include "base/config.h"
#include "nn/init.h"
#include "nn/model.h"

int main(int argc, char** argv) {
  std::string name;
  std::vector<std::string> overrides;
  CLI::App app("Prints a model's modules and parameter counts without training it",
               "describe_model");
  app.add_option("NAME", name, "the model (lenet5, resnet20_mnist, resnet18/34/50, bert)")
      ->required();
  app.add_option("KEY=VALUE", overrides,
                 "keys of the config's model section, e.g. preset=large nsp=true");
  try {
    if (!ada::cli::parse_command_line(app, argc, argv, "describe_model NAME [key=value ...]"))
      return 0;
    ada::Config cfg = ada::Config::parse("name: " + name, "command line");
    for (const auto& o : overrides) {
      const size_t eq = o.find('=');
      ADA_CHECK_ARG(eq != std::string::npos && eq > 0, ConfigError)
          << "command line: '" << o << "' is not KEY=VALUE (a key of the model section, e.g. "
          << "preset=large; configs/README.md lists them)";
      ADA_CHECK_ARG(o.substr(0, eq) != "name", ConfigError)
          << "command line: '" << o << "': the model is NAME, the first argument ('" << name
          << "' here)";
      cfg.set_override(o, "given as " + o);
    }
    const auto& factory = ada::nn::builtin_models().get(cfg.get<std::string>("name"), "model name");
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

// export_hf_bert CHECKPOINT OUT.safetensors: our BERT's weights from a checkpoint (its JSON or
// safetensors file, or a folder: the newest valid one) under Hugging Face's BertForPreTraining
// names (nn/models/bert_hf.h), for transformers' from_pretrained or any HF tool.
#include <filesystem>
#include <iostream>

#include "apps/common/cli.h"
#include "apps/trainer/checkpoint.h"
#include "nn/models/bert_hf.h"
#include "optim/checkpoint.h"

int main(int argc, char** argv) {
  using ada::IoError;
  std::string from, out;
  CLI::App app("Writes a BERT checkpoint's weights under Hugging Face's names", "export_hf_bert");
  app.add_option("checkpoint", from, "a checkpoint (.json or .safetensors) or a checkpoint folder")
      ->required();
  app.add_option("out", out, "the safetensors file to write")->required();
  try {
    if (!ada::cli::parse_command_line(app, argc, argv, "export_hf_bert CHECKPOINT OUT.safetensors"))
      return 0;
    ADA_CHECK_ARG(std::filesystem::exists(from), IoError)
        << from << ": no such checkpoint file or folder (a run's checkpoints/ folder, or one "
        << "ckpt-*.json or .safetensors in it)";
    const std::string path = ada::trainer::checkpoint_of(from, "export_hf_bert CHECKPOINT");
    for (const std::string& f : ada::trainer::checkpoint_files(path))
      ada::cli::refuse_overwriting("OUT", out, {f});
    const ada::NamedTensors ours =
        ada::optim::take_prefixed(ada::trainer::Checkpointer::read_tensors(path), "model.");
    const ada::NamedTensors hf = ada::nn::export_hf_bert(ours);
    ada::save_safetensors(out, hf.tensors, hf.metadata);
    std::cout << "export_hf_bert: " << hf.tensors.size() << " tensors of " << path << " written to "
              << out << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "export_hf_bert: " << e.what() << "\n";
    return 1;
  }
}

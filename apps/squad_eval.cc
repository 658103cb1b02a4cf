// squad_eval DATASET.json PREDICTIONS.json: scores predictions as SQuAD v1.1's official script
// does (data/squad.h); prints {"exact_match": ..., "f1": ...} (percentages) on its last line.
// Exits 1 naming the file and the field on a malformed input; unanswered questions score 0 and
// are named on stderr.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/common/cli.h"
#include "base/error.h"
#include "data/squad.h"

int main(int argc, char** argv) {
  std::string dataset_path, predictions_path;
  CLI::App app("Scores SQuAD v1.1 predictions as the official evaluate-v1.1.py does", "squad_eval");
  app.add_option("dataset", dataset_path, "the SQuAD v1.1 dataset (e.g. dev-v1.1.json)")
      ->required();
  app.add_option("predictions", predictions_path, "question id -> answer text, one JSON object")
      ->required();
  try {
    if (!ada::cli::parse_command_line(app, argc, argv, "squad_eval DATASET.json PREDICTIONS.json"))
      return 0;
    const ada::data::SquadDataset dataset = ada::data::read_squad(dataset_path);
    if (dataset.version != "1.1")
      std::cerr << "Evaluation expects v-1.1, but got dataset with v-" << dataset.version << "\n";
    const auto predictions = ada::data::read_squad_predictions(predictions_path);
    const auto score = ada::data::evaluate_squad(dataset, predictions);
    ADA_CHECK_ARG(score.questions > 0, IoError)
        << dataset_path << ": no question to score (a SQuAD v1.1 dev set has 10,570); is it the "
        << "dataset?";
    for (const auto& id : score.unanswered)
      std::cerr << "Unanswered question " << id << " will receive score 0.\n";
    // The official script ignores them too; a file of another dataset's ids shows here.
    const auto unknown =
        predictions.size() - (static_cast<size_t>(score.questions) - score.unanswered.size());
    if (unknown > 0)
      std::cerr << "squad_eval: " << unknown << " of the " << predictions.size() << " answers in "
                << predictions_path << " are for questions " << dataset_path
                << " does not have: ignored (predictions for another dataset?)\n";
    std::cout << nlohmann::ordered_json{{"exact_match", score.exact_match}, {"f1", score.f1}}.dump()
              << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "squad_eval: " << e.what() << "\n";
    return 1;
  }
}

// Apollo's task-level contract on the real model: the QA set data/apollo/questions.jsonl over
// data/apollo/document.txt (4,748 tokens, written for this project; every answer and its
// evidence sentence are in the document, the "miss" questions share no content word with it).
// Expected answers come from the document, not from any engine.
#include "accuracy/apollo_qa.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kv/apollo/store.h"
#include "model/model.h"
#include "testlib/paths.h"
#include "util/error.h"

namespace larql::accuracy {
namespace {

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ApolloQa, ParsesQuestionsAndNamesBadLines) {
  const auto q = parse_qa_jsonl(
      "{\"question\": \"Who?\", \"answer\": \" Ann\", \"evidence\": \"by Ann\"}\n\n{\"question\": \"Why?\", \"miss\": true}\n");
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q[0].answer, " Ann");
  EXPECT_EQ(q[0].evidence, "by Ann");
  EXPECT_TRUE(q[1].miss);
  EXPECT_EQ(qa_prompt("Who?"), "Question: Who?\nAnswer:");
  try {
    parse_qa_jsonl("{\"question\": \"Who?\", \"answer\": \" Ann\"}\n{\"question\": \"What?\"}\n");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Format);
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_qa_jsonl("{not json\n"), Error);
  EXPECT_THROW(parse_qa_jsonl("{\"question\": \"Why?\", \"miss\": \"yes\"}\n"), Error);
  EXPECT_THROW(parse_qa_jsonl("{\"question\": \" \", \"answer\": \" A\"}\n"), Error);
  EXPECT_THROW(parse_qa_jsonl("{\"question\": \"Who?\", \"answer\": 3}\n"), Error);
  EXPECT_THROW(parse_qa_jsonl("\n"), Error);
}

// Issue 7: `apollo eval` reported "hit" (the evidence lies in the router's best window) and
// "miss" (the engine refused: coverage below its threshold) for the same question. A refused
// question retrieved nothing, so it is never a hit.
TEST(ApolloQa, ARefusedQuestionIsNeverARetrievalHit) {
  LARQL_REQUIRE_MODEL(path);
  auto model = Model::load(path);
  auto fwd = std::make_shared<Forward>(model, 2);
  const Tokenizer tok = Tokenizer(model->source().vocabulary());
  const std::string doc = slurp(testing::source_dir() + "/data/apollo/document.txt");
  const std::string store = (std::filesystem::temp_directory_path() /
                             ("larql-apollo-verdict-" + std::to_string(::getpid()) + ".store")).string();
  save_apollo_store(build_apollo_store(tok.encode(doc, false, false), tok, model->fingerprint(), 256, 192), store);
  ApolloOptions o;
  o.store = store;
  ApolloEngine apollo(fwd, o);
  std::remove(store.c_str());
  // One word of the question ("Pellory") points at the evidence's window; the rest are not in
  // the document, so the question covers too little of it to be answered from there.
  const std::string evidence = "the Pellory Lighthouse was first lit in 1738";
  const auto items = parse_qa_jsonl(
      "{\"question\": \"Did the Pellory astronomers photograph quasars, nebulae, pulsars and comets?\", "
      "\"answer\": \" No\", \"evidence\": \"" + evidence + "\"}\n"
      "{\"question\": \"In what year was the Pellory Lighthouse first lit?\", \"answer\": \" 1738\", "
      "\"evidence\": \"" + evidence + "\"}\n");
  const QaReport r = run_apollo_qa(fwd, tok, apollo, doc, items, /*with_standard=*/false);
  ASSERT_EQ(r.items.size(), 2u);
  const QaResult& refused = r.items[0];
  ASSERT_TRUE(refused.apollo_miss) << refused.apollo_error;
  ASSERT_GE(refused.best_window, 0);
  // The premise: the best window does hold the evidence.
  EXPECT_NE(tok.decode(apollo.store().window_tokens_of(refused.best_window)).find(evidence), std::string::npos);
  EXPECT_EQ(refused.window, -1);
  EXPECT_FALSE(refused.retrieval_hit);
  const QaResult& answered = r.items[1];
  EXPECT_FALSE(answered.apollo_miss) << answered.apollo_error;
  EXPECT_EQ(answered.window, answered.best_window);
  EXPECT_TRUE(answered.retrieval_hit);
  EXPECT_EQ(r.retrieval_hits, 1);
  EXPECT_EQ(r.false_misses, 1);
}

TEST(ApolloQa, RetrievalKeepsWholeDocumentAccuracy) {
  LARQL_REQUIRE_MODEL(path);
  auto model = Model::load(path);
  auto fwd = std::make_shared<Forward>(model, 2);
  const Tokenizer tok = Tokenizer(model->source().vocabulary());
  const std::string dir = testing::source_dir() + "/data/apollo/";
  const std::string doc = slurp(dir + "document.txt");
  const auto items = parse_qa_jsonl(slurp(dir + "questions.jsonl"));
  const auto doc_ids = tok.encode(doc, false, false);
  ASSERT_GE(doc_ids.size(), 4000u);
  const std::string store = (std::filesystem::temp_directory_path() /
                             ("larql-apollo-qa-" + std::to_string(::getpid()) + ".store")).string();
  save_apollo_store(build_apollo_store(doc_ids, tok, model->fingerprint(), 256, 192), store);
  ApolloOptions o;
  o.store = store;
  ApolloEngine apollo(fwd, o);
  std::remove(store.c_str());
  const QaReport r = run_apollo_qa(fwd, tok, apollo, doc, items, /*with_standard=*/true);
  ASSERT_GE(r.answerable, 10);
  ASSERT_GE(r.misses, 1);
  for (const auto& it : r.items)
    std::printf("  %-62s window %3lld hit %d apollo %d standard %d%s\n", it.question.c_str(), (long long)it.window,
                it.retrieval_hit, it.apollo_correct, it.standard_correct, it.apollo_error.empty() ? "" : " (refused)");
  const double apollo_acc = static_cast<double>(r.apollo_correct) / static_cast<double>(r.answerable);
  const double standard_acc = static_cast<double>(r.standard_correct) / static_cast<double>(r.answerable);
  std::printf("apollo %.1f%% vs standard %.1f%% (whole document, %lld tokens); retrieval hits %lld/%lld; "
              "misses refused %lld/%lld; standard K/V %.1f MiB vs store %.1f KiB + K/V %.1f MiB\n",
              100 * apollo_acc, 100 * standard_acc, (long long)r.document_tokens, (long long)r.retrieval_hits,
              (long long)r.answerable, (long long)r.misses_refused, (long long)r.misses, r.standard_state_bytes / 1048576.0,
              r.apollo_store_bytes / 1024.0, r.apollo_state_bytes / 1048576.0);
  for (const auto& it : r.items) EXPECT_FALSE(it.retrieval_hit && it.apollo_miss) << it.question;
  EXPECT_EQ(r.misses_refused, r.misses) << "every unanswerable question must raise RetrievalMiss";
  EXPECT_EQ(r.false_misses, 0) << "no answerable question may be refused";
  ASSERT_EQ(r.with_evidence, r.answerable);
  EXPECT_GE(r.retrieval_hits * 10, r.answerable * 9) << "retrieval must find the evidence for >= 90% of questions";
  // The task-level contract: answering from the retrieved passage is at least as accurate as
  // reading the whole document (small models lose facts over long contexts).
  EXPECT_GE(apollo_acc, standard_acc);
  EXPECT_GE(apollo_acc, 0.6);
  EXPECT_LT(r.apollo_state_bytes, r.standard_state_bytes);
}

}  // namespace
}  // namespace larql::accuracy

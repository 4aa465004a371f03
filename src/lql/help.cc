#include "lql/help.h"

namespace larql::lql {

const std::vector<StatementHelp>& statement_help() {
  static const std::vector<StatementHelp> forms = {
      {"USE \"NAME.vindex\" | USE \"name\"", "USE \"gemma-3-270m.vindex\""},
      {"SHOW MODELS", "SHOW MODELS"},
      {"SHOW LAYERS [a-b]", "SHOW LAYERS 0-5"},
      {"SHOW FEATURES n [WHERE cond] [LIMIT n]", "SHOW FEATURES 9 WHERE token = \"Paris\" LIMIT 5"},
      {"SHOW ENTITIES [AT LAYER n] [LIMIT n]", "SHOW ENTITIES AT LAYER 9 LIMIT 20"},
      {"SHOW RELATIONS [AT LAYER n] [WITH EXAMPLES] [BRIEF | VERBOSE | RAW]", "SHOW RELATIONS AT LAYER 12 WITH EXAMPLES"},
      {"SHOW PATCHES", "SHOW PATCHES"},
      {"STATS", "STATS"},
      {"DESCRIBE \"entity\" [AT LAYER n | band] [BRIEF | VERBOSE | RAW] [RELATIONS ONLY]",
       "DESCRIBE \"France\" KNOWLEDGE VERBOSE"},
      {"WALK \"prompt\" [TOP n] [LAYERS a-b | ALL]", "WALK \"The capital of France is\" TOP 5 LAYERS 6-17"},
      {"EXPLAIN WALK \"prompt\" [TOP n] [LAYERS a-b | band] [VERBOSE] [RELATIONS ONLY]",
       "EXPLAIN WALK \"The capital of France is\" VERBOSE"},
      {"EXPLAIN INFER \"prompt\" [TOP n] [LAYERS a-b | band] [VERBOSE] [RELATIONS ONLY] [WITH ATTENTION]",
       "EXPLAIN INFER \"The capital of France is\" WITH ATTENTION LAYERS 12-17"},
      {"SELECT * | field, ... FROM EDGES | FEATURES [WHERE cond] [ORDER BY field [ASC | DESC]] [LIMIT n]",
       "SELECT layer, feature, token FROM FEATURES WHERE score > 10 ORDER BY score DESC LIMIT 20"},
      {"SELECT ... FROM EDGES NEAREST TO \"entity\" AT LAYER n [WHERE ...] [ORDER BY ...] [LIMIT n]",
       "SELECT * FROM EDGES NEAREST TO \"Paris\" AT LAYER 9 LIMIT 10"},
      {"SELECT ... FROM ENTITIES [NEAREST TO \"x\" [AT LAYER n]] [WHERE ...] [ORDER BY ...] [LIMIT n]",
       "SELECT * FROM ENTITIES NEAREST TO \"Paris\" LIMIT 10"},
      {"INFER \"prompt\" [TOP n] [COMPARE] [VERIFY ON | OFF]", "INFER \"The capital of France is\" TOP 5 COMPARE"},
      {"TRACE \"prompt\" [FOR \"token\"] [LAYERS a-b] [POSITIONS ALL | LAST] [DECOMPOSE]",
       "TRACE \"The capital of France is\" FOR \"Paris\" DECOMPOSE"},
      {"INSERT INTO EDGES (entity, relation, target) VALUES (\"e\", \"r\", \"t\") [AT LAYER n] "
       "[MODE COMPOSE [ALPHA x] | MODE ROBUST [ALPHA x] | MODE SUBJECT [ALPHA x] | MODE KNN [CONFIDENCE x]]",
       "INSERT INTO EDGES (entity, relation, target) VALUES (\"Atlantis\", \"capital\", \"Poseidonia\")"},
      {"UPDATE EDGES SET target = \"token\" WHERE cond", "UPDATE EDGES SET target = \"Lyon\" WHERE layer = 12 AND feature = 7"},
      {"DELETE FROM EDGES WHERE cond", "DELETE FROM EDGES WHERE layer = 12 AND feature = 8"},
      {"BEGIN PATCH \"f.vlp\"", "BEGIN PATCH \"atlantis.vlp\""},
      {"SAVE PATCH", "SAVE PATCH"},
      {"APPLY PATCH \"f.vlp\"", "APPLY PATCH \"atlantis.vlp\""},
      {"REMOVE PATCH \"f.vlp\"", "REMOVE PATCH \"atlantis.vlp\""},
      {"DIFF a b [LAYER n] [RELATION \"r\"] [LIMIT n] [INTO PATCH \"d.vlp\"]   (a, b: CURRENT or \"path.vindex\")",
       "DIFF CURRENT \"gemma-3-270m.vindex\" LIMIT 20 INTO PATCH \"delta.vlp\""},
      {"COMPILE a INTO VINDEX \"out.vindex\"", "COMPILE CURRENT INTO VINDEX \"gemma-edited.vindex\""},
      {"COMPILE a INTO MODEL \"out.gguf\"", "COMPILE CURRENT INTO MODEL \"gemma-edited.gguf\""},
      {"statement |> statement   (a pipe: one after the other)", "STATS |> SHOW LAYERS 0-1"},
  };
  return forms;
}

const std::vector<std::string_view>& not_built_yet() {
  static const std::vector<std::string_view> items = {
      "WALK ... COMPARE (INFER ... COMPARE compares the predictions, DIFF the features)",
      "UPDATE / DELETE ... WHERE entity ... (a feature has no entity: filter on token, what it writes)",
      "UPDATE ... SET of a field other than target",
  };
  return items;
}

std::string help_text() {
  std::string out = "Statements end with ';' and may span lines. Keywords are case-insensitive.\n";
  for (const auto& f : statement_help()) out += "  " + std::string(f.syntax) + "\n";
  out +=
      "cond:  field (= != < <= > >=) value | field [NOT] LIKE 'P%' | field [NOT] IN (v, ...)\n"
      "       | field [NOT] BETWEEN v AND v, joined by AND, OR, NOT and ( )\n"
      "band:  SYNTAX | KNOWLEDGE | OUTPUT | ALL LAYERS\n"
      "Not built yet (rejected with a message):\n";
  for (const auto& n : not_built_yet()) out += "  " + std::string(n) + "\n";
  out +=
      "Commands: \\help (\\h, \\?) this text   \\q (\\quit) quit (or Ctrl-D)\n"
      "The grammar and every statement's columns: docs/lql.md.\n";
  return out;
}

}  // namespace larql::lql

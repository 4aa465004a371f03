// The LQL syntax tree (docs/lql.md): one struct per statement, every optional clause an
// std::optional, every node with the position it started at.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "lql/lexer.h"

namespace larql::lql {

/// A literal: a string, an integer or a float.
struct Value {
  enum class Kind { String, Integer, Float } kind = Kind::String;
  std::string str;
  int64_t integer = 0;
  double number = 0;  ///< the value as a double, for Integer and Float
  Pos pos;
};

/// A WHERE condition. A chain `a AND b AND c` is one And node with three args (likewise OR), so
/// the tree is only as deep as the parentheses and NOTs written (at most 256 levels, the parser's
/// limit): walks over it may recurse.
struct Cond {
  enum class Kind { And, Or, Not, Compare, Like, In, Between } kind = Kind::Compare;
  std::vector<Cond> args;                ///< And / Or: 2 or more, in source order; Not: 1
  std::string field;                     ///< lower-cased
  std::string op;                        ///< Compare: = != < <= > >=
  std::vector<Value> values;             ///< Compare / Like: 1; In: 1+; Between: 2 (low, high)
  Pos pos;                               ///< a predicate: its field; And / Or: the first operator; Not: NOT
};

/// An inclusive layer range, with where each bound was written (for range errors).
struct LayerRange {
  int64_t first = 0, last = 0;
  Pos first_pos, last_pos;
};

enum class Band { Syntax, Knowledge, Output, All };
enum class Detail { Default, Brief, Verbose, Raw };

struct UseStmt { std::string path; };
struct ShowStmt {
  enum class What { Models, Layers, Relations, Features, Entities, Patches } what = What::Models;
  std::optional<LayerRange> range;       ///< SHOW LAYERS a-b
  std::optional<int64_t> layer;          ///< SHOW FEATURES n, SHOW RELATIONS/ENTITIES AT LAYER n
  Pos layer_pos;                         ///< where `layer` was written
  std::optional<Cond> where;             ///< SHOW FEATURES
  std::optional<int64_t> limit;
  bool with_examples = false;            ///< SHOW RELATIONS
  Detail detail = Detail::Default;       ///< SHOW RELATIONS
};
struct StatsStmt {};
struct DescribeStmt {
  std::string entity;
  std::optional<int64_t> layer;
  Pos layer_pos;
  std::optional<Band> band;
  Detail detail = Detail::Default;
  bool relations_only = false;
};
struct WalkStmt {
  std::string prompt;
  std::optional<int64_t> top;
  std::optional<LayerRange> layers;      ///< absent or ALL: every layer
  bool compare = false;
};
struct ExplainStmt {
  bool infer = false;                    ///< EXPLAIN INFER (else EXPLAIN WALK)
  std::string prompt;
  std::optional<int64_t> top;
  std::optional<LayerRange> layers;
  std::optional<Band> band;
  bool verbose = false;
  bool relations_only = false;
  bool with_attention = false;           ///< EXPLAIN INFER only
};
struct SelectStmt {
  std::vector<std::string> fields;       ///< lower-cased; empty for *
  std::vector<Pos> field_pos;            ///< where each of `fields` was written
  enum class From { Edges, Features, Entities } from = From::Edges;
  std::optional<std::string> nearest;    ///< NEAREST TO "entity" ...
  std::optional<int64_t> nearest_layer;  ///< ... AT LAYER n
  Pos nearest_layer_pos;
  std::optional<Cond> where;
  std::optional<std::string> order_by;   ///< lower-cased field
  Pos order_by_pos;
  bool descending = false;
  std::optional<int64_t> limit;
};
struct InferStmt {
  std::string prompt;
  std::optional<int64_t> top;
  bool compare = false;
  bool verify = true;                    ///< VERIFY ON (default) | OFF: KNN facts need their entity in the prompt
  bool verify_given = false;             ///< the VERIFY clause was written
};
struct TraceStmt {
  std::string prompt;
  std::optional<std::string> target;     ///< FOR "token"
  std::optional<LayerRange> layers;
  bool all_positions = false;            ///< POSITIONS ALL (default: the last)
  bool decompose = false;
};
enum class InsertMode { Compose, Knn, Robust, Subject };
struct InsertStmt {
  std::string entity, relation, target;
  std::optional<InsertMode> mode;        ///< MODE COMPOSE (the default) | MODE KNN | MODE ROBUST | MODE SUBJECT
  std::optional<int64_t> layer;
  Pos layer_pos;
  std::optional<double> confidence;
  Pos confidence_pos;                    ///< of CONFIDENCE's number
  std::optional<double> alpha;
  Pos alpha_pos;                         ///< of ALPHA's number
};
struct Assignment {
  std::string field;
  Value value;
  Pos pos;                               ///< of the field
};
struct UpdateStmt {
  std::vector<Assignment> set;
  Cond where;
};
struct DeleteStmt { Cond where; };
struct PatchStmt {
  enum class Op { Begin, Save, Apply, Remove } op = Op::Begin;
  std::string name;                      ///< BEGIN / APPLY / REMOVE
};
/// A vindex reference: CURRENT (the one in use) or a path.
struct VindexRef {
  bool current = false;
  std::string path;
  Pos pos;
};
struct DiffStmt {
  VindexRef a, b;
  std::optional<int64_t> layer;
  Pos layer_pos;
  std::optional<std::string> relation;
  std::optional<int64_t> limit;
  std::optional<std::string> into_patch;
};
struct CompileStmt {
  VindexRef source;
  bool into_model = false;               ///< INTO MODEL (a GGUF file) else INTO VINDEX
  std::string path;
};

using StmtBody = std::variant<UseStmt, ShowStmt, StatsStmt, DescribeStmt, WalkStmt, ExplainStmt, SelectStmt,
                              InferStmt, TraceStmt, InsertStmt, UpdateStmt, DeleteStmt, PatchStmt, DiffStmt,
                              CompileStmt>;

struct Statement {
  StmtBody body;
  Pos pos;
};

/// Statements joined by |>: each runs after the one before, in one session.
struct Pipeline {
  std::vector<Statement> stages;
  Pos pos;
};

}  // namespace larql::lql

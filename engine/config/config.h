// The configuration of one run, read strictly from one YAML file plus `--set` overrides.
// Each struct lists its fields once, in visit() (engine/config/fields.h): that table reads,
// writes (`dump_config`) and documents (`config_reference`) the config. Defaults are the member
// initialisers below and nowhere else. `type:` fields are validated strings; the one factory per
// concept (model, data) switches on them. A Config returned by load_config is resolved: derived
// defaults are filled in (table dims, feature names) and every rule has been checked.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/fields.h"
#include "engine/config/yaml.h"

namespace shardrec {

struct TrainConfig {
    int64_t steps = 0;  // required
    int64_t seed = 0;
    int64_t log_every = 50;
    int64_t eval_every = 0;  // 0: evaluate only after the last step
    int64_t eval_samples = 65536;
    double target_auc = 0;  // MLPerf style: stop once an evaluation reaches it; 0: never
    std::string pipeline = "sparse_dist";  // base | sparse_dist | prefetch_sparse_dist
    int64_t checkpoint_every = 0;          // steps between checkpoints; 0: none
    std::string checkpoint_dir;            // empty: the run directory's checkpoints/
    int64_t checkpoint_keep = 3;           // the newest kept; 0: all

    void visit(FieldVisitor& v);
    void resolve(ConfigNode& node);
    void from_yaml(ConfigNode& node);
    YAML::Node to_yaml() const;
};

struct DataConfig {
    // Planted-signal generator; ids per table follow a Zipf law.
    struct Synthetic {
        double zipf_alpha = 1.05;
        double signal_scale = 1.0;
        int64_t raw_id_drift = 0;  // managed-collision tables: samples per new raw id; 0: none
        std::vector<std::string> raw_id_mod_tables;  // plain tables fed raw id mod num_embeddings
        int64_t raw_id_eval_offset = 0;  // eval sample i sees the vocabulary at i + this
        int64_t raw_id_vocabulary = 0;   // Zipf ranks of the raw ids; 0: num_embeddings

        void visit(FieldVisitor& v);
    };

    // Binary Criteo shards written by `shardrec data criteo-preprocess` (a directory).
    struct CriteoBinary {
        std::string path;  // required
        int64_t eval_days = 1;
        double eval_fraction = 0.0;

        void visit(FieldVisitor& v);
    };

    std::string type = "synthetic";  // synthetic | criteo_binary
    int64_t batch_size = 0;          // per rank, required
    Synthetic synthetic;             // when type == "synthetic"
    CriteoBinary criteo_binary;      // when type == "criteo_binary"

    void visit(FieldVisitor& v);
    void from_yaml(ConfigNode& node);
    YAML::Node to_yaml() const;
    // Checks the rules that involve train: an evaluation needs an eval split.
    void resolve(ConfigNode& node, const TrainConfig& train);
};

struct ModelConfig {
    // One embedding table (TorchRec EmbeddingBagConfig).
    struct Table {
        std::string name;  // required, unique
        int64_t num_embeddings = 0;
        int64_t embedding_dim = 0;               // resolved: 0 in YAML takes model.embedding_dim
        std::vector<std::string> feature_names;  // resolved: empty in YAML gives {"f_<name>"}
        std::string pooling = "sum";             // sum | mean
        double pooling_factor = 1.0;             // mean ids per sample and feature
        std::string data_type = "f32";           // f32 | f16 | bf16 (engine DType names)
        bool weighted = false;
        int64_t position_weights = 0;  // > 0: position-weighted features (TorchRec
                                       // PositionWeightedModule), weights of positions [0, n)

        // TorchRec MCHManagedCollisionModule (engine/modules/managed_collision.h): the table's
        // ids are raw 64-bit values remapped to rows. zch_size 0: none.
        struct ManagedCollision {
            int64_t zch_size = 0;
            std::string eviction_policy = "lfu";  // lfu | lru | distance_lfu
            double decay_exponent = 1.0;          // lru, distance_lfu: (steps since use)^decay
            int64_t eviction_interval = 1;
            std::string threshold = "none";  // none | average | dynamic[:N] | probabilistic[:p]
            int64_t input_hash_size = 0;     // 0: 2^63 (TorchRec's default)
            int64_t mch_size = 0;
            int64_t total_num_buckets = 1;  // hash buckets, each a module of its own

            void visit(FieldVisitor& v);
        };

        ManagedCollision managed_collision;

        void visit(FieldVisitor& v);
    };

    struct Dcn {  // model.type == "dlrm_dcn": LowRankCrossNet over concat(dense, pooled)
        int64_t num_layers = 3;
        int64_t low_rank = 512;

        void visit(FieldVisitor& v);
    };

    struct DeepFm {  // model.type == "deepfm": the deep MLP over the concatenated embeddings
        std::vector<int64_t> hidden = {256, 128};

        void visit(FieldVisitor& v);
    };

    std::string type;  // dlrm | dlrm_dcn | deepfm, required
    int64_t dense_in_features = 13;
    int64_t embedding_dim = 0;  // the default of tables[].embedding_dim; 0: none
    std::vector<Table> tables;
    std::vector<int64_t> bottom_mlp;  // layer sizes after the dense input; last == embedding dim
    std::vector<int64_t> top_mlp;     // layer sizes after the interaction; last == 1 (the logit)
    Dcn dcn;                          // when type == "dlrm_dcn"
    DeepFm deepfm;                    // when type == "deepfm"

    void visit(FieldVisitor& v);
    void from_yaml(ConfigNode& node);
    YAML::Node to_yaml() const;
    // Fills derived defaults and checks the rules across fields, recording errors at `node`.
    void resolve(ConfigNode& node);
};

struct OptimizerConfig {
    // The optimizer of the dense parameters (MLPs, cross layers) and its learning-rate schedule.
    struct Dense {
        std::string type = "sgd";  // sgd | adagrad | adam
        double learning_rate = 0.01;
        double eps = 1e-8;
        double beta1 = 0.9;
        double beta2 = 0.999;
        double weight_decay = 0.0;
        double initial_accumulator_value = 0.0;
        int64_t warmup_steps = 0;
        int64_t decay_start_step = 0;
        int64_t decay_steps = 0;  // 0: no decay
        double decay_power = 2.0;
        double end_lr_factor = 0.0;

        void visit(FieldVisitor& v);
        void resolve(ConfigNode& node);
    };

    // The fused optimizer applied to embedding rows inside the lookup's backward.
    struct Sparse {
        std::string type = "sgd";  // sgd | adagrad | rowwise_adagrad | adam
        double learning_rate = 0.01;
        double eps = 1e-8;
        double beta1 = 0.9;
        double beta2 = 0.999;
        double weight_decay = 0.0;
        double initial_accumulator_value = 0.0;

        void visit(FieldVisitor& v);
    };

    Dense dense;
    Sparse sparse;

    void visit(FieldVisitor& v);
    void from_yaml(ConfigNode& node);
    YAML::Node to_yaml() const;
};

// The CPUs this process may run on (sched_getaffinity: taskset, cgroup cpusets), at least 1.
int64_t usable_cpus();

struct RuntimeConfig {
    std::string device = "cpu";  // cpu | cuda (the node-local rank's GPU) | cuda:N
    std::string log_level = "info";
    int64_t threads = 0;  // CPU threads per rank, at most usable_cpus(); 0: configure_threads
    std::string bounds_check = "fatal";      // fatal | warning | ignore (TorchRec BoundsCheckMode)
    std::string nan_policy = "stop";         // stop | skip_batch
    double comm_timeout_s = 600;             // SHARDREC_COMM_TIMEOUT_S overrides it; 0: no limit
    std::string gemm_math = "f32";           // f32 | tf32 (CUDA) | bf16: the GEMMs' math
    std::string hot_row_update = "chunked";  // chunked | block: the CUDA backward's hot rows

    void visit(FieldVisitor& v);
    void from_yaml(ConfigNode& node);
    YAML::Node to_yaml() const;
    void resolve(ConfigNode& node);
};

// How the embedding tables are split over ranks (engine/distributed/sharding_plan.h builds the
// plan from this for the run's world size). Tables without an entry take sharding_type with the
// default placement; an entry names a model table and fixes its type, ranks, kernel or widths.
// With planner: auto the entries constrain the auto planner instead (type, and ranks if given).
struct ShardingConfig {
    // The cache of key_value tables (TorchRec CacheParams). In a table
    // entry, 0 and "" take the section's values.
    struct Cache {
        double load_factor = 0.2;
        std::string algorithm = "lru";   // lru | lfu
        std::string precision;           // f32 | f16 | bf16; "": the table's data_type
        bool prefetch_pipeline = false;  // the section's only (the pipeline is the run's)
        int64_t sample_batches = 16;     // the section's only: the planner's CacheStatistics

        void visit(FieldVisitor& v, bool entry);
    };

    // Where key_value tables keep their rows: a file per shard under path/<run id>/.
    struct Storage {
        std::string path;

        void visit(FieldVisitor& v);
    };

    struct Table {
        std::string name;            // required: a model table
        std::string sharding_type;   // resolved: sharding.sharding_type (manual); "": any (auto)
        std::string compute_kernel;  // resolved: dense for data_parallel, else the section's
        std::vector<int64_t> ranks;  // the rank of each shard; empty: the default placement
        std::vector<int64_t> column_widths;  // column_wise only; empty: an even split
        Cache cache{0, "", ""};              // resolved: the section's where not given
        std::string location;                // where the entry was read, for later errors

        void visit(FieldVisitor& v);
    };

    std::string planner = "manual";            // manual | auto
    std::string sharding_type = "table_wise";  // tables without an entry
    std::string compute_kernel = "fused";      // sharding_names.h; data_parallel is always dense
    Cache cache;
    Storage storage;
    std::string plan_file;  // a saved plan (`shardrec plan --out`)
    std::string topology;   // topology YAML for planner: auto
    // 2D parallelism (TorchRec DMPCollection): the tables are sharded over world / R ranks and
    // that sharding is replicated R times; 1: one sharding over the world.
    int64_t replica_groups = 1;
    std::vector<Table> tables;

    void visit(FieldVisitor& v);
    // Checks entries against the model's tables (did-you-mean) and fills per-table defaults;
    // the kernels against runtime.device.
    void resolve(ConfigNode& node,
                 const ModelConfig& model,
                 const RuntimeConfig& runtime,
                 const TrainConfig& train);
    // The kernel and cache of `table` (its entry's, else the section's).
    std::string kernel_of(const std::string& table) const;
    const Cache& cache_of(const std::string& table) const;
};

// Quantized communication (TorchRec QCommsConfig): the precision of the values on the wire.
// The collectives decode to f32 and sum in f32; fp32 (the default) changes nothing, bit for bit.
struct CommConfig {
    // The pooled-embedding output dists (all-to-all, reduce-scatter, all-gather).
    struct QComms {
        std::string forward = "fp32";   // fp32 | fp16 | bf16 | fp8: the pooled values
        std::string backward = "fp32";  // the same choices: their gradients

        void visit(FieldVisitor& v);
    };

    QComms qcomms;
    std::string allreduce_precision = "fp32";  // fp32 | fp16 | bf16: the dense gradients
    std::string hierarchical = "auto";         // auto | true | false: row-sharded output dists

    void visit(FieldVisitor& v);
};

struct Config {
    std::string source_file;  // the YAML file it was read from (not a field)
    TrainConfig train;
    DataConfig data;
    ModelConfig model;
    OptimizerConfig optimizer;
    RuntimeConfig runtime;
    ShardingConfig sharding;
    CommConfig comm;

    void visit(FieldVisitor& v);
    void from_yaml(ConfigNode& node);
    YAML::Node to_yaml() const;
};

// Reads, applies `overrides` ("dotted.key=value", as `--set`), resolves and checks the config.
// Throws one Error listing every problem found, one per line, each with its path and location.
Config load_config(const std::string& path, const std::vector<std::string>& overrides);
// The same from YAML text; `source_name` stands for the file name in messages.
Config parse_config(const std::string& text,
                    const std::vector<std::string>& overrides,
                    const std::string& source_name = "<string>");

// The resolved config as YAML (every field, derived defaults filled in); parses back to the same.
std::string dump_config(const Config& config);

// Every key with its type, default and doc line, as a Markdown table (`validate --reference`).
std::string config_reference();

}  // namespace shardrec

//! The input and output of the succeeded generations the benches seed
//! straight into the database (`router` and `hot_paths`): as the
//! store writes them for a real one (compact, keys in order), the input
//! with the defaults filled in and the output as the worker records the
//! clip, so that a page of seeded generations costs what a page of real
//! ones costs (issue 42).

pub const INPUT: &str = r#"{"aspect_ratio":"16:9","duration":5,"generate_audio":false,"prompt":"a lighthouse on a cliff at dusk, waves below, slow push in","resolution":"720p"}"#;

/// The SQLite statement that inserts generations `$2..=$3` of account `$1`
/// in one statement: succeeded, spread over five of the six models (never
/// `vendor_6/model_6`), generation `i` created at `$4 - i` milliseconds,
/// with input `$5` and output `$6` (`INPUT`, `OUTPUT`).
pub const SQLITE_INSERT: &str = "WITH RECURSIVE n(i) AS (SELECT $2 UNION ALL SELECT i + 1 FROM n WHERE i < $3) \
     INSERT INTO generations (id, account_id, model, endpoint, mode, status, input, \
     output, price_micros, official_micros, source, attempts, max_attempts, created_at, \
     started_at, completed_at) \
     SELECT printf('gen_seed_%09d', i), $1, \
     'vendor_' || (i % 5 + 1) || '/model_' || (i % 5 + 1), \
     'vendor_' || (i % 5 + 1) || '/model_' || (i % 5 + 1) || '/text-to-video', \
     'text-to-video', 'succeeded', $5, $6, 250000, 300000, 'api', 1, 3, \
     $4 - i, $4 - i, $4 - i FROM n";

pub const OUTPUT: &str = r#"{"content_type":"video/mp4","duration_s":5.0,"fps":24,"has_audio":false,"height":720,"seed":1234567,"size_bytes":1843200,"video_url":"http://127.0.0.1:8080/api/v1/files/outputs/Zq8vT1sYb2xW9kLmN3pR5tU7/gen_01a223cd58f47639a998e892cf4882e8.mp4","width":1280}"#;

//! A PostgreSQL database made for one bench run and dropped after it, for
//! the benches that measure PostgreSQL when `VIDGATE_BENCH_POSTGRES_URL`
//! names a server.

use sqlx::Connection;

/// A database created for the run and dropped after it.
pub struct BenchDatabase {
    server_url: String,
    name: String,
    pub url: String,
}

impl BenchDatabase {
    /// A new, empty database on the server at `server_url`, named after
    /// `purpose` and this process.
    pub async fn create(server_url: &str, purpose: &str) -> BenchDatabase {
        let name = format!("vidgate_bench_{purpose}_{}", std::process::id());
        let mut connection = sqlx::PgConnection::connect(server_url).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name}"
        )))
        .execute(&mut connection)
        .await
        .unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut connection)
            .await
            .unwrap();
        let mut url = url::Url::parse(server_url).unwrap();
        url.set_path(&name);
        BenchDatabase {
            server_url: server_url.to_owned(),
            url: url.to_string(),
            name,
        }
    }

    pub async fn drop_database(self) {
        let mut connection = sqlx::PgConnection::connect(&self.server_url).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        )))
        .execute(&mut connection)
        .await
        .unwrap();
    }
}

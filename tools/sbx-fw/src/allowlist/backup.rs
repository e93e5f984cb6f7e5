//! The backup store's endpoints, so sbx-backup can reach them from inside.

use sbx_core::config::{StoreKind, StoreUrl};

/// The endpoints sbx-backup reaches for `[backup].url`, derived from the
/// same variables object_store's `from_env` reads, so a backup from inside
/// the sandbox gets through and nothing else does:
/// s3: `AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL` / `AWS_ENDPOINT`, else
/// the regional endpoint (path style and the bucket's virtual host), plus
/// STS when a web identity token is used; gs: the storage API and Google's
/// token endpoints; file:// and memory:// reach nothing.
pub fn backup_endpoints(url: &StoreUrl, env: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    let var = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    match url.kind {
        StoreKind::S3 => {
            let region = var("AWS_REGION")
                .or_else(|| var("AWS_DEFAULT_REGION"))
                .unwrap_or_else(|| "us-east-1".to_owned());
            let mut out = match var("AWS_ENDPOINT_URL_S3")
                .or_else(|| var("AWS_ENDPOINT_URL"))
                .or_else(|| var("AWS_ENDPOINT"))
            {
                Some(e) => vec![e],
                None => {
                    let bucket = &url.bucket;
                    vec![
                        format!("https://s3.{region}.amazonaws.com"),
                        format!("https://{bucket}.s3.{region}.amazonaws.com"),
                    ]
                }
            };
            if var("AWS_WEB_IDENTITY_TOKEN_FILE").is_some() {
                out.push(
                    var("AWS_ENDPOINT_URL_STS")
                        .unwrap_or_else(|| format!("https://sts.{region}.amazonaws.com")),
                );
            }
            out
        }
        StoreKind::Gs => [
            "https://storage.googleapis.com",
            "https://oauth2.googleapis.com",
            "https://accounts.google.com",
        ]
        .map(str::to_owned)
        .to_vec(),
        StoreKind::File | StoreKind::Memory => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backup_endpoints_follow_object_stores_variables() {
        let url = |u: &str| u.parse::<StoreUrl>().unwrap();
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let none = env(&[]);
        assert_eq!(
            backup_endpoints(&url("s3://bkt/home"), &none),
            [
                "https://s3.us-east-1.amazonaws.com",
                "https://bkt.s3.us-east-1.amazonaws.com"
            ]
        );
        let regional = env(&[("AWS_DEFAULT_REGION", "eu-west-1")]);
        assert_eq!(
            backup_endpoints(&url("s3://bkt"), &regional)[0],
            "https://s3.eu-west-1.amazonaws.com"
        );
        // AWS_REGION wins over the default region; an S3-specific endpoint
        // over the generic one; web identity adds STS.
        let custom = env(&[
            ("AWS_REGION", "eu-north-1"),
            ("AWS_DEFAULT_REGION", "eu-west-1"),
            ("AWS_ENDPOINT_URL", "https://generic.example.com"),
            ("AWS_ENDPOINT_URL_S3", "https://minio.example.com"),
            ("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/token"),
        ]);
        assert_eq!(
            backup_endpoints(&url("s3://bkt/x"), &custom),
            [
                "https://minio.example.com",
                "https://sts.eu-north-1.amazonaws.com"
            ]
        );
        let empty = env(&[("AWS_ENDPOINT", "  ")]);
        assert_eq!(backup_endpoints(&url("s3://b"), &empty).len(), 2);
        assert!(
            backup_endpoints(&url("gs://bkt/p"), &none)
                .contains(&"https://storage.googleapis.com".to_owned())
        );
        assert!(backup_endpoints(&url("file:///var/tmp/b"), &custom).is_empty());
    }
}

# Per-repo sandbox image, built by `sbx-run build` on top of the shared base.
# Add only what this repository needs; the base has the tools, the AI CLIs
# and the guards. Do not add ENTRYPOINT or USER (sbx-run build refuses them
# unless --allow-entrypoint), and do not copy the code in: the workspace is
# mounted at run time.
ARG BASE_IMAGE_TAG=latest
FROM agent-sandbox-base:${BASE_IMAGE_TAG}

# Optional: repo-specific packages (keep minimal and clean caches)
# USER root is implied: the base image's build user is root.
# RUN apt-get update && apt-get install -y --no-install-recommends \
#     <repo-specific-packages> \
#   && rm -rf /var/lib/apt/lists/*

# Optional: extra global tools unique to this repo
# RUN npm install -g <tool>@<version>

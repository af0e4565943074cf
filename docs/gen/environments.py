import mkdocs_gen_files
with mkdocs_gen_files.open("environments/index.md", "w") as f: f.write("# Environments\n")

import mkdocs_gen_files
with mkdocs_gen_files.open("tutorials/index.md", "w") as f: f.write("# Tutorials\n")

"""Point each chapter page's Colab launch link at the chapter's rendition.

sphinx-book-theme builds the Colab link from the page's path, ``chapters/NN_x.ipynb``,
and Colab shows that notebook's MyST raw. tools/colab.py writes the chapter in plain
Markdown to ``colab/NN_x.ipynb``; this hook, run after the theme's own (priority 501),
swaps the path in the link. Binder keeps the source notebook: JupyterLab renders it.
"""


def colab_rendition(app, pagename, templatename, context, doctree):
    if not pagename.startswith("chapters/"):
        return
    source = f"/{pagename}.ipynb"
    rendition = f"/colab/{pagename.removeprefix('chapters/')}.ipynb"
    for group in context.get("header_buttons", []):
        if group.get("label") != "launch-buttons":
            continue
        for button in group.get("buttons", []):
            if button.get("text") == "Colab" and button["url"].endswith(source):
                button["url"] = button["url"].removesuffix(source) + rendition


def setup(app):
    app.connect("html-page-context", colab_rendition, priority=600)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

// The noa viewer: browses the data root through GET /v1/view/... of the same server.
// Plain JavaScript, nothing loaded from elsewhere. Everything a file or header says (names, labels) is
// put in the page as text (textContent), never as HTML. The API key is kept in sessionStorage and sent
// as the X-API-Key header; pictures are fetched (so they carry it) and drawn from blobs, never by URL.
"use strict";

(() => {
  const KEY = "noa-api-key";
  const HEADER = "X-API-Key";
  const TILE_CACHE = 256; // tiles kept decoded
  const MAX_ZOOM = 3; // at most 2^3 screen pixels a plane pixel
  const EER_GROUP = 40; // an EER movie's frames per fraction at first (RELION's --eer_grouping default)
  const $ = (id) => document.getElementById(id);

  // What the page shows lives in its URL's fragment (file, plane, contrast, zoom, a tilt series' exclusions), so a
  // view can be linked, bookmarked and reloaded: written after each drawing, read once at start.
  let linked = new URLSearchParams(location.hash.slice(1));

  const view = {
    folder: "", file: null, info: null, geometry: null, frames: 0, // frames: an EER movie's (0: not a movie)
    projectDir: null, rows: new Map(), // a particle file's project folder (null: the data root), rows by section
    tilts: null, // a tilt series' sections: each one's angle and dose, from the files beside it (null: none given)
    tiltRequests: 0, // /tilts asked (the answer to the latest is shown)
    lo: 0, hi: 1, edges: null, counts: null, limits: null,
    zoom: 0, ox: 0, oy: 0, // display pixels per plane pixel = 2^zoom; (ox, oy): where plane pixel (0, 0) is drawn
    generation: 0, tiles: new Map(), spectrum: null,
    // A stack as a montage: a page of sections from `first`; where the picture's panels are drawn (layout: the
    // server's Montage-Layout, with the scale and place (ox, oy) of the picture on the canvas); the one hovered.
    montage: { first: 0, layout: null, hovered: null },
  };

  class KeyNeeded extends Error {}

  // -- requests ------------------------------------------------------------------------------------

  async function request(url) {
    const headers = {};
    const key = sessionStorage.getItem(KEY);
    if (key) headers[HEADER] = key;
    const response = await fetch(url, { headers, credentials: "same-origin" });
    if (response.status === 401) {
      sessionStorage.removeItem(KEY);
      askKey(key ? "That key was refused; type the key this server was started with." : "");
      throw new KeyNeeded();
    }
    if (!response.ok) {
      let detail = `${response.status} ${response.statusText}`;
      try { detail = (await response.json()).detail || detail; } catch (_) { /* not a problem body */ }
      throw new Error(detail);
    }
    return response;
  }

  function api(endpoint, params) {
    return request(`v1/view/${endpoint}?${new URLSearchParams(params)}`);
  }

  function report(error) {
    if (error instanceof KeyNeeded) return;
    $("status").textContent = error.message;
    document.body.dataset.state = "error";
  }

  function askKey(message) {
    $("key-form").hidden = false;
    $("status").textContent = message || "This server asks for an API key.";
    document.body.dataset.state = "key";
    $("key").focus();
  }

  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY, $("key").value);
    $("key").value = "";
    $("key-form").hidden = true;
    $("status").textContent = "";
    start().catch(report);
  });

  // The linked folder and file (from the URL), or the data root.
  async function start() {
    const file = view.file || linked.get("file");
    const folder = file ? file.split("/").slice(0, -1).join("/") : (linked.get("folder") || view.folder);
    await browse(folder);
    if (file) await openFile(file, view.file ? null : linked);
  }

  // -- the file browser ----------------------------------------------------------------------------

  function button(text, onClick) {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = text;
    b.addEventListener("click", onClick);
    return b;
  }

  function cell(row, text, className) {
    const td = row.insertCell();
    td.textContent = text;
    if (className) td.className = className;
    return td;
  }

  // Each axis's pixel size, "unknown" where the header has none (null in a listing, 0 in a header), as noa info.
  function pixelSize(sizes, unit) {
    if (!sizes || !sizes.some((v) => v)) return "unknown";
    return sizes.map((v) => (v ? Number(v.toPrecision(6)) : "unknown")).join(" × ") + " " + (unit || "");
  }

  async function browse(folder) {
    const listing = await (await api("list", { path: folder })).json();
    view.folder = listing.path;
    const crumbs = $("crumbs");
    crumbs.replaceChildren(button("data root", () => browse("").catch(report)));
    let path = "";
    for (const part of listing.path ? listing.path.split("/") : []) {
      path = path ? `${path}/${part}` : part;
      const target = path;
      const separator = document.createElement("span");
      separator.textContent = "/";
      crumbs.append(separator, button(part, () => browse(target).catch(report)));
    }
    const body = $("files").tBodies[0];
    body.replaceChildren();
    for (const folderEntry of listing.folders) {
      const row = body.insertRow();
      row.insertCell().append(button(folderEntry.name + "/", () => browse(folderEntry.path).catch(report)));
      row.dataset.folder = folderEntry.path;
    }
    for (const file of listing.files) {
      const row = body.insertRow();
      row.dataset.file = file.path;
      if (file.error) {
        cell(row, file.name);
        const td = cell(row, file.error, "error");
        td.colSpan = 4;
        continue;
      }
      row.insertCell().append(button(file.name, () => openFile(file.path).catch(report)));
      cell(row, file.format);
      cell(row, file.shape.join(" × "));
      cell(row, file.dtype);
      cell(row, pixelSize(file.pixel_size, file.pixel_unit));
    }
    $("truncated").hidden = !listing.truncated;
    document.body.dataset.state = "listed";
  }

  // -- one file ------------------------------------------------------------------------------------

  function headerRows(info) {
    const rows = [
      ["file", info.path], ["format", info.format],
      ["dtype", info.dtype + (info.mode !== null && info.mode !== undefined ? ` (MRC mode ${info.mode})` : "")],
      ["shape (BDHW)", info.shape.join(" × ")], ["order", info.order], ["kind", info.kind],
      ["pixel size (DHW)", pixelSize(info.pixel_size, info.pixel_unit)],
      ["origin (DHW)", (info.origin || []).join(", ")],
    ];
    for (const [name, v] of Object.entries(info.statistics || {})) rows.push([`header ${name}`, String(v)]);
    if (info.exttyp || info.extended_header_bytes) {
      rows.push(["extended header", `${info.exttyp || "no type"}, ${info.extended_header_bytes} bytes`]);
    }
    (info.labels || []).forEach((label, i) => rows.push([i ? "" : "labels", label]));
    (info.notices || []).forEach((note) => rows.push(["note", note]));
    return rows;
  }

  function fillTable(table, rows) {
    table.tBodies[0].replaceChildren();
    for (const [name, text] of rows) addRow(table, name, text);
  }

  function addRow(table, name, text) {
    const row = table.tBodies[0].insertRow();
    cell(row, name);
    cell(row, text);
    return row;
  }

  function setRange(input, output, count, value, note = "") {
    input.max = String(Math.max(0, count - 1));
    input.value = String(value);
    output.textContent = `${value} / ${count - 1}${note}`;
  }

  // The section slider, labelled with the section's tilt where the files beside a tilt series give it.
  function setSection(count, value) {
    setRange($("section"), $("section-out"), count, value, tiltText(value));
  }

  // " · −21.0° · 35.2 e/Å²": a tilt series' section's angle and the dose it had received before it (where known),
  // and why noa tiltseries would leave it out with the exclusions typed (" · left out: 63° is beyond 60°").
  function tiltText(section) {
    const tilt = view.tilts && view.tilts[section];
    if (!tilt) return "";
    const angle = Math.abs(tilt.angle).toFixed(1);
    const sign = tilt.angle < 0 && Number(angle) !== 0 ? "−" : "";
    const dose = tilt.pre_exposure === null ? "" : ` · ${tilt.pre_exposure.toFixed(1)} e/Å²`;
    const left = tilt.excluded ? ` · left out: ${tilt.excluded}` : "";
    return ` · ${sign}${angle}°${dose}${left}`;
  }

  // The exclusion inputs, by the names /v1/view/tilts (and the page's URL) give them.
  const EXCLUSIONS = [["exclude-views", "exclude"], ["exclude-angle", "max_angle"], ["exclude-dark", "exclude_dark"]];

  // noa tiltseries's exclusions as typed, named as /v1/view/tilts takes them (those given only).
  function exclusionParams() {
    const params = {};
    for (const [id, name] of EXCLUSIONS) {
      const value = $(id).value.trim();
      if (value) params[name] = value;
    }
    return params;
  }

  // The same exclusions as noa tiltseries's options, to copy: "--exclude 1-3,40-41 --max-angle 60".
  function exclusionOptions(params) {
    const quoted = (text) => (/^[\w.,-]+$/.test(text) ? text : `'${text.replaceAll("'", "'\\''")}'`);
    return Object.entries(params).map(([name, value]) => `--${name.replaceAll("_", "-")} ${quoted(value)}`)
      .join(" ");
  }

  // The header's rows about the tilts, in place of those shown before.
  function showTiltRows(rows) {
    for (const row of [...$("header").tBodies[0].rows]) if (row.dataset.tilts) row.remove();
    for (const [name, text] of rows) addRow($("header"), name, text).dataset.tilts = "1";
  }

  // What the files beside a stack say of its sections (fetched once a file, and again with each exclusion typed;
  // stacks only: a particle file's sections are its rows, an EER movie's are fractions of one exposure), and in the
  // header where it comes from, or why not, and how many tilts noa tiltseries would leave out.
  async function loadTilts(path, info) {
    const [batch, depth] = info.shape;
    if (batch < 2 || depth > 1 || info.format === "particles" || info.format === "eer") return;
    const excluding = exclusionParams();
    const asked = ++view.tiltRequests;
    let found;
    try {
      found = await (await api("tilts", { file: path, ...excluding })).json();
    } catch (error) {
      if (error instanceof KeyNeeded || view.file !== path || asked !== view.tiltRequests) return;
      // an exclusion the server refuses: said beside the inputs, the tilts shown as they were
      if (Object.keys(excluding).length) $("exclude-problem").textContent = error.message;
      else showTiltRows([["tilts", error.message]]);
      return;
    }
    if (view.file !== path || asked !== view.tiltRequests) return; // another file or exclusion meanwhile
    view.tilts = found.tilts;
    $("exclude-box").hidden = !found.tilts;
    $("exclude-problem").textContent = "";
    const rows = [];
    if (found.tilts) rows.push(["tilts", `from ${[...new Set(Object.values(found.from))].join(", ")}`]);
    else if (found.notice) rows.push(["tilts", found.notice]);
    if (found.tilts && Object.keys(excluding).length) {
      const left = found.tilts.flatMap((tilt, section) => (tilt.excluded === null ? [] : [section]));
      rows.push(["left out", `${left.length} of ${found.tilts.length} tilts`
        + (left.length ? ` (sections ${left.join(", ")})` : "")], ["noa tiltseries", exclusionOptions(excluding)]);
    }
    showTiltRows(rows);
    setSection(batch, Number($("section").value));
  }

  async function openFile(path, restore) {
    view.file = path;
    view.tiles.clear();
    view.rows.clear();
    view.montage.first = 0;
    view.montage.layout = null;
    view.projectDir = (restore && restore.get("project_dir")) || null;
    let info = await (await api("info", { file: path, ...projectParams() })).json();
    // An EER movie is shown as fractions: EER_GROUP frames each (or what the URL says), as RELION groups them.
    view.frames = info.format === "eer" ? info.shape[0] : 0;
    $("eer-box").hidden = !view.frames;
    if (view.frames) {
      const group = Number(restore && restore.get("eer_group"));
      const upsampling = restore && restore.get("eer_upsampling");
      $("eer-group").max = String(view.frames);
      $("eer-group").value = String(Number.isInteger(group) && group >= 1 && group <= view.frames ? group
        : Math.min(EER_GROUP, view.frames));
      $("eer-upsampling").value = ["1", "2", "3"].includes(upsampling) ? upsampling : "1";
      $("eer-frames").textContent = `of ${view.frames} frames`;
      info = await (await api("info", { file: path, ...readingParams() })).json();
    }
    $("montage").checked = info.format === "particles"; // a particle file opens as a page of its particles
    showInfo(info);
    const [batch, depth] = info.shape;
    view.tilts = null; // the last file's, until this one's come
    // another series' views: none, or those the URL gives (asked of the server as if typed)
    for (const [id, name] of EXCLUSIONS) $(id).value = (restore && restore.get(name)) || "";
    $("exclude-box").hidden = true;
    $("exclude-problem").textContent = "";
    setSection(batch, 0);
    loadTilts(path, info).catch(report);
    const volume = depth > 1;
    $("axis-box").hidden = $("index-box").hidden = $("projection-box").hidden = !volume;
    $("axis").value = "z";
    $("projection").checked = false;
    $("index").disabled = false;
    resetIndex();
    if (restore) restoreState(restore);
    showMode();
    setDownload(path);
    await loadPlane(!restore || !restore.has("zoom"));
  }

  function showInfo(info) {
    view.info = info;
    $("viewer").hidden = false;
    sizeCanvas();
    $("file-name").textContent = view.file;
    fillTable($("header"), headerRows(info));
    showMode();
  }

  // A stack (not a volume) may be shown as a montage; the controls of the mode shown.
  function showMode() {
    const [batch, depth] = view.info.shape;
    $("montage-box").hidden = batch < 2 || depth > 1;
    const montage = montageOn();
    $("montage-controls").hidden = !montage;
    $("section-box").hidden = montage || batch < 2;
    $("spectrum-box").hidden = $("zoom-box").hidden = montage;
    $("image").classList.toggle("montage", montage);
  }

  function montageOn() {
    return !$("montage-box").hidden && $("montage").checked;
  }

  // Sections a page of the montage: the input's, kept within its bounds.
  function montageCount() {
    const input = $("montage-count");
    const count = Math.min(Math.max(1, Math.round(Number(input.value)) || 1), Number(input.max));
    input.value = String(count);
    return count;
  }

  // A particle file's project folder, where the URL names one (the stacks it names are relative to it).
  function projectParams() {
    return view.projectDir ? { project_dir: view.projectDir } : {};
  }

  // The read options of the file: a particle file's project folder, an EER movie's frames per fraction and
  // upsampling.
  function readingParams() {
    if (!view.frames) return projectParams();
    const params = { ...projectParams(), eer_group: $("eer-group").value };
    if ($("eer-upsampling").value !== "1") params.eer_upsampling = $("eer-upsampling").value;
    return params;
  }

  // Another grouping or upsampling: the movie's fractions again (their count, their shape), the same section
  // where it still is one.
  async function regroup() {
    const group = Number($("eer-group").value);
    if (!Number.isInteger(group) || group < 1 || group > view.frames) {
      $("eer-group").value = String(Math.min(Math.max(1, Math.round(group) || 1), view.frames));
    }
    const info = await (await api("info", { file: view.file, ...readingParams() })).json();
    showInfo(info);
    const batch = info.shape[0];
    setSection(batch, Math.min(Number($("section").value), batch - 1));
    view.tiles.clear();
    await loadPlane(true);
  }

  // The controls as the URL set them (values the file cannot have are left as they are).
  function restoreState(state) {
    const [batch, depth] = view.info.shape;
    const within = (value, count) => Number.isInteger(value) && value >= 0 && value < count;
    const section = Number(state.get("section"));
    if (within(section, batch)) setSection(batch, section);
    if (!$("montage-box").hidden && state.has("montage")) $("montage").checked = state.get("montage") === "1";
    const count = Number(state.get("count"));
    if (within(count - 1, Number($("montage-count").max))) $("montage-count").value = String(count);
    const first = Number(state.get("first"));
    if (within(first, batch)) view.montage.first = first;
    if (depth > 1 && ["z", "y", "x"].includes(state.get("axis"))) {
      $("axis").value = state.get("axis");
      resetIndex();
      const index = Number(state.get("index"));
      if (within(index, Number($("index").max) + 1)) setRange($("index"), $("index-out"), Number($("index").max) + 1, index);
      $("projection").checked = depth > 1 && state.get("projection") === "1";
      $("index").disabled = $("projection").checked;
    }
    for (const [id, values] of [["rule", ["sigma:3", "percentiles:1,99", "minmax", "range"]],
      ["cmap", ["gray", "fire", "ice", "viridis"]]]) {
      if (values.includes(state.get(id))) $(id).value = state.get(id);
    }
    $("invert").checked = state.get("invert") === "1";
    $("spectrum").checked = state.get("spectrum") === "1";
    if ($("rule").value === "range") {
      const [lo, hi] = [Number(state.get("lo")), Number(state.get("hi"))];
      if (Number.isFinite(lo) && Number.isFinite(hi) && lo < hi) view.restoredRange = [lo, hi];
      else $("rule").value = "sigma:3";
    }
    const zoom = Number(state.get("zoom"));
    if (Number.isInteger(zoom) && state.has("ox") && state.has("oy")) {
      view.restoredPlace = [zoom, Number(state.get("ox")) || 0, Number(state.get("oy")) || 0];
    }
  }

  function rememberState() {
    const state = new URLSearchParams({ file: view.file, ...readingParams(), ...exclusionParams() });
    const [batch, depth] = view.info.shape;
    if (batch > 1) state.set("section", $("section").value);
    if (depth > 1) {
      state.set("axis", $("axis").value);
      if ($("projection").checked) state.set("projection", "1");
      else state.set("index", $("index").value);
    }
    state.set("rule", $("rule").value);
    if ($("rule").value === "range") {
      state.set("lo", String(Number(view.lo.toPrecision(9))));
      state.set("hi", String(Number(view.hi.toPrecision(9))));
    }
    if ($("invert").checked) state.set("invert", "1");
    state.set("cmap", $("cmap").value);
    if ($("spectrum").checked) state.set("spectrum", "1");
    if (!$("montage-box").hidden) state.set("montage", montageOn() ? "1" : "0");
    if (montageOn()) {
      state.set("first", view.montage.first);
      state.set("count", montageCount());
    } else if (!$("spectrum").checked) {
      for (const [name, value] of [["zoom", view.zoom], ["ox", view.ox], ["oy", view.oy]]) state.set(name, value);
    }
    history.replaceState(null, "", `#${state}`);
  }

  function resetIndex() {
    const [, depth, height, width] = view.info.shape;
    const count = { z: depth, y: height, x: width }[$("axis").value];
    setRange($("index"), $("index-out"), count, Math.floor(count / 2));
  }

  function planeParams() {
    const params = { file: view.file, ...readingParams() };
    const [batch, depth] = view.info.shape;
    if (batch > 1) params.section = $("section").value;
    if (depth > 1) {
      params.axis = $("axis").value;
      if ($("projection").checked) params.projection = "true";
      else params.index = $("index").value;
    }
    return params;
  }

  function displayParams() {
    const params = { cmap: $("cmap").value };
    if ($("invert").checked) params.invert = "true";
    return params;
  }

  function rangeText() {
    return `range:${Number(view.lo.toPrecision(9))},${Number(view.hi.toPrecision(9))}`;
  }

  async function loadPlane(fit) {
    const generation = ++view.generation;
    document.body.dataset.state = "loading";
    const hist = await (await api("histogram", planeParams())).json();
    if (generation !== view.generation) return;
    view.geometry = { rows: hist.plane[0], cols: hist.plane[1], tile: hist.tile, levels: hist.levels };
    view.edges = hist.edges;
    view.counts = hist.counts;
    view.limits = hist.limits;
    const rule = $("rule").value;
    if (rule !== "range") [view.lo, view.hi] = hist.limits[rule].map(Number);
    else if (view.restoredRange) [view.lo, view.hi] = view.restoredRange;
    view.restoredRange = null;
    const stats = hist.statistics || {};
    fillTable($("statistics"), [
      ["plane", `${hist.plane[0]} rows × ${hist.plane[1]} columns`],
      ...Object.entries(stats).map(([name, v]) => [name, String(Number(Number(v).toPrecision(6)))]),
      ["from", hist.step > 1 ? `block means of ${hist.step} × ${hist.step} pixels` : "every pixel"],
    ]);
    drawHistogram();
    view.tiles.clear();
    if (view.restoredPlace) {
      const [zoom, ox, oy] = view.restoredPlace;
      view.zoom = Math.min(MAX_ZOOM, Math.max(-(view.geometry.levels - 1), zoom));
      view.ox = ox;
      view.oy = oy;
      view.restoredPlace = null;
    } else if (fit) fitView();
    await render();
  }

  // -- the picture: tiles of the level that matches the zoom, or the spectrum ------------------------

  function level() { return Math.max(0, -view.zoom); }
  function magnification() { return 2 ** Math.max(0, view.zoom); }
  function scale() { return 2 ** view.zoom; }

  // The largest zoom at which the whole plane fits (small images magnified up to 8 times).
  function fitView() {
    const canvas = $("image");
    const { rows, cols, levels } = view.geometry;
    const fits = (z) => {
      const L = Math.max(0, -z);
      const m = 2 ** Math.max(0, z);
      return Math.ceil(cols / 2 ** L) * m <= canvas.width && Math.ceil(rows / 2 ** L) * m <= canvas.height;
    };
    let zoom = MAX_ZOOM;
    while (zoom > -(levels - 1) && !fits(zoom)) zoom -= 1;
    view.zoom = zoom;
    const L = level();
    const m = magnification();
    view.ox = Math.floor((canvas.width - Math.ceil(cols / 2 ** L) * m) / 2);
    view.oy = Math.floor((canvas.height - Math.ceil(rows / 2 ** L) * m) / 2);
  }

  function sizeCanvas() {
    const canvas = $("image");
    const width = Math.max(256, Math.floor($("stage").clientWidth));
    if (canvas.width !== width) canvas.width = width;
    canvas.height = 512;
  }

  function tileURL(L, x, y) {
    const params = { ...planeParams(), ...displayParams(), contrast: rangeText(), level: L, x, y };
    return `v1/view/tile?${new URLSearchParams(params)}`;
  }

  function bitmap(url) {
    let entry = view.tiles.get(url);
    if (!entry) {
      entry = request(url).then((r) => r.blob()).then((blob) => createImageBitmap(blob));
      view.tiles.set(url, entry);
      entry.catch(() => view.tiles.delete(url));
      while (view.tiles.size > TILE_CACHE) view.tiles.delete(view.tiles.keys().next().value);
    }
    return entry;
  }

  async function render() {
    const generation = ++view.generation;
    const canvas = $("image");
    const context = canvas.getContext("2d");
    context.imageSmoothingEnabled = false;
    document.body.dataset.state = "loading";
    if (montageOn()) {
      await renderMontage(generation, context);
      return;
    }
    if ($("spectrum").checked) {
      await renderSpectrum(generation, context);
      return;
    }
    const { rows, cols, tile } = view.geometry;
    const L = level();
    const m = magnification();
    const span = tile * m; // display pixels a whole tile covers
    const across = Math.ceil(Math.ceil(cols / 2 ** L) / tile); // a level's pixels: ceil(n / 2^L), as the server
    const down = Math.ceil(Math.ceil(rows / 2 ** L) / tile);
    const first = [Math.max(0, Math.floor(-view.ox / span)), Math.max(0, Math.floor(-view.oy / span))];
    const last = [Math.min(across - 1, Math.floor((canvas.width - view.ox - 1) / span)),
      Math.min(down - 1, Math.floor((canvas.height - view.oy - 1) / span))];
    const wanted = [];
    for (let y = first[1]; y <= last[1]; y += 1) {
      for (let x = first[0]; x <= last[0]; x += 1) wanted.push([x, y, bitmap(tileURL(L, x, y))]);
    }
    const drawn = await Promise.all(wanted.map(([, , p]) => p));
    if (generation !== view.generation) return;
    context.fillStyle = "#444";
    context.fillRect(0, 0, canvas.width, canvas.height);
    wanted.forEach(([x, y], i) => {
      const image = drawn[i];
      context.drawImage(image, view.ox + x * span, view.oy + y * span, image.width * m, image.height * m);
    });
    finished();
  }

  async function renderSpectrum(generation, context) {
    const canvas = context.canvas;
    const rule = $("rule").value === "range" ? "sigma:3" : $("rule").value;
    const size = Math.min(canvas.width, canvas.height);
    const params = { ...planeParams(), ...displayParams(), contrast: rule, spectrum: "true", size };
    const image = await createImageBitmap(await (await api("image", params)).blob());
    if (generation !== view.generation) return;
    context.fillStyle = "#444";
    context.fillRect(0, 0, canvas.width, canvas.height);
    context.drawImage(image, Math.floor((canvas.width - image.width) / 2), Math.floor((canvas.height - image.height) / 2));
    finished();
  }

  // The montage's layout, from its Montage-Layout header ("first=0, count=11, columns=4, height=32, ...").
  function montageLayout(header) {
    return Object.fromEntries((header || "").split(",").map((field) => field.trim().split("="))
      .map(([name, value]) => [name, Number(value)]));
  }

  // A page of the stack's sections, fitted to the canvas: about as many columns as make square panels fill it,
  // each panel as large as that leaves it (the server block-means larger ones); drawn whole pixels a pixel where
  // it is magnified.
  async function renderMontage(generation, context) {
    const canvas = context.canvas;
    const batch = view.info.shape[0];
    const count = montageCount();
    const first = Math.min(view.montage.first, batch - 1);
    const panels = Math.min(count, batch - first); // the last page has what is left
    const columns = Math.min(panels, Math.ceil(Math.sqrt((panels * canvas.width) / canvas.height)));
    const size = Math.min(1024, Math.max(16, Math.floor(Math.min(canvas.width / columns,
      canvas.height / Math.ceil(panels / columns)))));
    const contrast = $("rule").value === "range" ? rangeText() : $("rule").value;
    const response = await api("montage", { file: view.file, ...readingParams(), ...displayParams(), contrast,
      first, count, columns, size });
    const layout = montageLayout(response.headers.get("Montage-Layout"));
    const picture = await createImageBitmap(await response.blob());
    if (generation !== view.generation) return;
    const fit = Math.min(canvas.width / picture.width, canvas.height / picture.height);
    const scale = fit >= 1 ? Math.min(Math.floor(fit), 2 ** MAX_ZOOM) : fit;
    const ox = Math.floor((canvas.width - picture.width * scale) / 2);
    const oy = Math.floor((canvas.height - picture.height * scale) / 2);
    context.imageSmoothingEnabled = scale < 1;
    context.fillStyle = "#444";
    context.fillRect(0, 0, canvas.width, canvas.height);
    context.drawImage(picture, ox, oy, picture.width * scale, picture.height * scale);
    view.montage.layout = { ...layout, scale, ox, oy };
    view.montage.hovered = null;
    $("montage-page").textContent = `sections ${layout.first} to ${layout.first + layout.count - 1} of ${batch}`;
    $("montage-previous").disabled = first === 0;
    $("montage-next").disabled = first + count >= batch;
    finished();
  }

  // A scale bar of a round length, about a fifth of the picture's width, where the pixel size is known.
  function drawScaleBar() {
    const bar = $("scale-bar");
    const columns = { z: 3, y: 3, x: 2 }[view.info.shape[1] > 1 ? $("axis").value : "z"]; // the plane's width axis
    const size = (view.info.pixel_size || [])[columns - 1];
    if (!size || $("spectrum").checked || montageOn()) {
      bar.hidden = true;
      return;
    }
    const perPixel = size / scale(); // length a canvas pixel spans
    const target = ($("image").width / 5) * perPixel;
    const power = 10 ** Math.floor(Math.log10(target));
    const length = [5, 2, 1].map((k) => k * power).find((v) => v <= target) || power;
    const unit = view.info.pixel_unit || "";
    let label = `${Number(length.toPrecision(3))} ${unit}`;
    if (unit === "Å" && length >= 10000) label = `${Number((length / 10000).toPrecision(3))} µm`;
    else if (unit === "Å" && length >= 1000) label = `${Number((length / 10).toPrecision(3))} nm`;
    bar.firstElementChild.style.width = `${Math.round(length / perPixel)}px`;
    bar.lastElementChild.textContent = label;
    bar.dataset.length = String(length);
    bar.hidden = false;
  }

  function finished() {
    // What is drawn where (zoom ox oy: plane pixel (0, 0) at canvas (ox, oy), 2^zoom canvas pixels a pixel; a
    // montage: "montage scale ox oy", its picture's pixel (0, 0) at (ox, oy), scale canvas pixels a pixel).
    const montage = view.montage.layout;
    $("image").dataset.view = montageOn() ? `montage ${montage.scale} ${montage.ox} ${montage.oy}`
      : `${$("spectrum").checked ? "spectrum" : view.zoom} ${view.ox} ${view.oy}`;
    drawScaleBar();
    clearTimeout(view.remembering); // once the view settles (a pan draws many times; browsers limit URL changes)
    view.remembering = setTimeout(rememberState, 150);
    document.body.dataset.state = "ready";
    document.body.dataset.renders = String(Number(document.body.dataset.renders) + 1);
  }

  function zoomAt(cx, cy, step) {
    const zoom = Math.min(MAX_ZOOM, Math.max(-(view.geometry.levels - 1), view.zoom + step));
    if (zoom === view.zoom) return;
    const ratio = 2 ** (zoom - view.zoom);
    view.ox = Math.round(cx - (cx - view.ox) * ratio);
    view.oy = Math.round(cy - (cy - view.oy) * ratio);
    view.zoom = zoom;
    render().catch(report);
  }

  // -- the cursor readout: one request at a time, the latest position wins --------------------------

  const cursor = { wanted: null, busy: false };

  // What a particle file's row says of the section's particle (fetched once a section): its columns, shown
  // beside the value. Other files have no rows.
  function particleRow(section) {
    let entry = view.rows.get(section);
    if (!entry) {
      entry = api("row", { file: view.file, ...projectParams(), section }).then((r) => r.json());
      view.rows.set(section, entry);
      entry.catch(() => view.rows.delete(section));
    }
    return entry;
  }

  function showRow(found) {
    $("row").hidden = !found;
    if (!found) return;
    $("row").caption.textContent = `particle: row ${found.row} of the ${found.kind} file`;
    fillTable($("row"), Object.entries(found.columns).map(([name, v]) => [name, Array.isArray(v) ? v.join(" × ")
      : String(v)]));
  }

  // The section whose panel of the montage is under the cursor (null: none, or a gap between panels).
  function montageSection(event) {
    const m = view.montage.layout;
    if (!m) return null;
    const rect = $("image").getBoundingClientRect();
    const x = (event.clientX - rect.left - m.ox) / m.scale;
    const y = (event.clientY - rect.top - m.oy) / m.scale;
    const column = Math.floor(x / (m.width + m.gap));
    const row = Math.floor(y / (m.height + m.gap));
    const inside = x >= 0 && y >= 0 && column < m.columns && x - column * (m.width + m.gap) < m.width
      && y - row * (m.height + m.gap) < m.height;
    const n = row * m.columns + column;
    return inside && n < m.count ? m.first + n : null;
  }

  // The hovered panel's section and, for a particle file, its row.
  async function hoverPanel(section) {
    if (section === view.montage.hovered) return;
    view.montage.hovered = section;
    $("readout").textContent = section === null ? "" : `section ${section}${tiltText(section)}`;
    if (section === null || view.info.format !== "particles") {
      showRow(null);
      return;
    }
    const found = await particleRow(String(section));
    if (view.montage.hovered === section) showRow(found);
  }

  function planePixel(event) {
    const s = scale();
    const rect = $("image").getBoundingClientRect(); // offsetX/Y are rounded: the exact position
    const x = Math.floor((event.clientX - rect.left - view.ox) / s);
    const y = Math.floor((event.clientY - rect.top - view.oy) / s);
    const { rows, cols } = view.geometry;
    return x >= 0 && y >= 0 && x < cols && y < rows ? [x, y] : null;
  }

  async function readValue() {
    if (cursor.busy || !cursor.wanted) return;
    cursor.busy = true;
    const [x, y] = cursor.wanted;
    cursor.wanted = null;
    try {
      const found = await (await api("value", { ...planeParams(), x, y })).json();
      $("readout").textContent = `x ${found.x}, y ${found.y}: ${Number(Number(found.value).toPrecision(7))}`;
      showRow(view.info.format === "particles" ? await particleRow(planeParams().section || "0") : null);
    } catch (error) {
      report(error);
    } finally {
      cursor.busy = false;
      readValue();
    }
  }

  // -- the histogram and its draggable limits --------------------------------------------------------

  function histX(v) {
    const canvas = $("histogram");
    const first = view.edges[0];
    const last = view.edges[view.edges.length - 1];
    return ((v - first) / (last - first || 1)) * canvas.width;
  }

  // Where a limit's line is drawn: limits beyond the histogram's range sit at its ends.
  function drawnX(v) {
    return Math.min(Math.max(histX(v), 1), $("histogram").width - 1);
  }

  function histValue(x) {
    const canvas = $("histogram");
    const first = view.edges[0];
    const last = view.edges[view.edges.length - 1];
    return first + (Math.min(Math.max(x, 0), canvas.width) / canvas.width) * (last - first);
  }

  function drawHistogram() {
    const canvas = $("histogram");
    const context = canvas.getContext("2d");
    context.clearRect(0, 0, canvas.width, canvas.height);
    const heights = view.counts.map((c) => Math.log1p(c));
    const top = Math.max(...heights, 1);
    const width = canvas.width / heights.length;
    context.fillStyle = "#678";
    heights.forEach((h, i) => {
      const bar = (h / top) * (canvas.height - 4);
      context.fillRect(i * width, canvas.height - bar, Math.max(1, width), bar);
    });
    for (const [v, colour] of [[view.lo, "#c22"], [view.hi, "#22c"]]) {
      const x = drawnX(v);
      context.fillStyle = colour;
      context.fillRect(x - 1, 0, 2, canvas.height);
    }
    $("limits").textContent = `limits ${Number(view.lo.toPrecision(6))} to ${Number(view.hi.toPrecision(6))}`;
  }

  const drag = { which: null };

  $("histogram").addEventListener("mousedown", (event) => {
    if (!view.edges) return;
    const lo = Math.abs(event.offsetX - drawnX(view.lo));
    const hi = Math.abs(event.offsetX - drawnX(view.hi));
    drag.which = Math.min(lo, hi) > 8 ? null : (lo <= hi ? "lo" : "hi");
  });

  window.addEventListener("mousemove", (event) => {
    if (!drag.which) return;
    const canvas = $("histogram");
    const v = histValue(event.clientX - canvas.getBoundingClientRect().left - canvas.clientLeft);
    if (drag.which === "lo") view.lo = Math.min(v, view.hi - Math.abs(view.hi) * 1e-6 - 1e-12);
    else view.hi = Math.max(v, view.lo + Math.abs(view.lo) * 1e-6 + 1e-12);
    drawHistogram();
  });

  window.addEventListener("mouseup", () => {
    if (!drag.which) return;
    drag.which = null;
    $("rule").value = "range";
    render().catch(report);
  });

  // -- panning and zooming ---------------------------------------------------------------------------

  const pan = { from: null };
  const image = $("image");

  image.addEventListener("mousedown", (event) => {
    if (!montageOn()) pan.from = [event.clientX, event.clientY, view.ox, view.oy];
  });
  window.addEventListener("mouseup", () => { pan.from = null; });
  image.addEventListener("mousemove", (event) => {
    if (!view.geometry) return;
    if (montageOn()) {
      hoverPanel(montageSection(event)).catch(report);
      return;
    }
    if ($("spectrum").checked) return;
    if (pan.from) {
      const [x, y, ox, oy] = pan.from;
      view.ox = ox + event.clientX - x;
      view.oy = oy + event.clientY - y;
      render().catch(report);
      return;
    }
    const pixel = planePixel(event);
    if (!pixel) {
      $("readout").textContent = "";
      showRow(null);
      return;
    }
    cursor.wanted = pixel;
    readValue();
  });
  image.addEventListener("mouseleave", () => { if (montageOn()) hoverPanel(null).catch(report); });
  // A click on a panel of the montage opens its section alone.
  image.addEventListener("click", (event) => {
    const section = montageOn() ? montageSection(event) : null;
    if (section === null) return;
    $("montage").checked = false;
    showMode();
    setSection(view.info.shape[0], section);
    loadPlane(true).catch(report);
  });
  image.addEventListener("wheel", (event) => {
    if (!view.geometry || $("spectrum").checked || montageOn()) return;
    event.preventDefault();
    zoomAt(event.offsetX, event.offsetY, event.deltaY < 0 ? 1 : -1);
  }, { passive: false });
  $("zoom-in").addEventListener("click", () => view.geometry && zoomAt(image.width / 2, image.height / 2, 1));
  $("zoom-out").addEventListener("click", () => view.geometry && zoomAt(image.width / 2, image.height / 2, -1));
  $("fit").addEventListener("click", () => { if (view.geometry) { fitView(); render().catch(report); } });

  // -- controls --------------------------------------------------------------------------------------

  $("section").addEventListener("input", () => {
    setSection(view.info.shape[0], Number($("section").value));
    loadPlane(false).catch(report);
  });
  $("index").addEventListener("input", () => {
    const count = Number($("index").max) + 1;
    setRange($("index"), $("index-out"), count, Number($("index").value));
    loadPlane(false).catch(report);
  });
  $("axis").addEventListener("change", () => { resetIndex(); loadPlane(true).catch(report); });
  // The montage on: the page that holds the section shown; off: that section alone.
  $("montage").addEventListener("change", () => {
    const count = montageCount();
    if (montageOn()) view.montage.first = Math.floor(Number($("section").value) / count) * count;
    showMode();
    loadPlane(true).catch(report);
  });
  $("montage-previous").addEventListener("click", () => {
    view.montage.first = Math.max(0, view.montage.first - montageCount());
    render().catch(report);
  });
  $("montage-next").addEventListener("click", () => {
    const first = view.montage.first + montageCount();
    if (first < view.info.shape[0]) view.montage.first = first;
    render().catch(report);
  });
  $("montage-count").addEventListener("change", () => {
    const count = montageCount();
    view.montage.first = Math.floor(view.montage.first / count) * count;
    render().catch(report);
  });
  for (const id of ["eer-group", "eer-upsampling"]) $(id).addEventListener("change", () => regroup().catch(report));
  // An exclusion typed: the tilts again, with the sections noa tiltseries would leave out.
  for (const [id] of EXCLUSIONS) {
    $(id).addEventListener("change", () => {
      rememberState();
      loadTilts(view.file, view.info).catch(report);
    });
  }
  $("projection").addEventListener("change", () => {
    $("index").disabled = $("projection").checked; // a projection has no slice
    loadPlane(false).catch(report);
  });
  $("rule").addEventListener("change", () => {
    if ($("rule").value !== "range" && view.limits) [view.lo, view.hi] = view.limits[$("rule").value].map(Number);
    drawHistogram();
    render().catch(report);
  });
  for (const id of ["invert", "cmap", "spectrum"]) $(id).addEventListener("change", () => render().catch(report));

  // The download carries the key too: with one, the file is fetched and handed over as a blob.
  function setDownload(path) {
    const link = $("download");
    link.href = "v1/files/" + path.split("/").map(encodeURIComponent).join("/");
    link.download = path.split("/").pop();
  }

  $("download").addEventListener("click", (event) => {
    if (!sessionStorage.getItem(KEY)) return; // a plain link: no key to send
    event.preventDefault();
    const link = event.currentTarget;
    request(link.href).then((r) => r.blob()).then((blob) => {
      const url = URL.createObjectURL(blob);
      const temporary = document.createElement("a");
      temporary.href = url;
      temporary.download = link.download;
      temporary.click();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    }).catch(report);
  });

  window.addEventListener("resize", () => { if (view.geometry) { sizeCanvas(); render().catch(report); } });

  // A link pasted into this tab (only the fragment changes: the page is not loaded again).
  window.addEventListener("hashchange", () => {
    linked = new URLSearchParams(location.hash.slice(1));
    view.file = null;
    start().catch(report);
  });

  sizeCanvas();
  start().catch(report);
})();

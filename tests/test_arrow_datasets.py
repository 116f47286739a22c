"""ArrowColumns (pimloader.datasets.arrow): Hugging Face datasets' encoded image and audio
columns as items (bytes, target), in memory, after save_to_disk / load_from_disk and from
Parquet; shuffle and select kept; pickling by file reference; keys; errors naming the column.

Oracles: the photo and clip files' own bytes (open().read()), `datasets`' own cells and its
Image feature's decode (Pillow) against torchvision's decode_image of the wrapper's bytes,
libsndfile (soundfile) for the clips, `datasets`' own shuffle/select order (a column "n"
holds each row's file)."""
from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
import soundfile
import torch
from torchvision.io import ImageReadMode, decode_image

from _arrow_data import (CLASSES, file_bytes, in_memory, make_clips, make_photos,  # noqa: I100
                         saved)
from pimloader.datasets import ArrowColumns, ArrowSource, EncodedSample, source_of

hf = pytest.importorskip("datasets")
hf.disable_progress_bars()

KINDS = ["in_memory", "saved", "parquet"]


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    return make_photos(tmp_path_factory.mktemp("photos"))


@pytest.fixture(scope="module")
def tables(photos, tmp_path_factory):
    """{kind: Dataset} of the photos: in memory (paths), loaded from disk, from Parquet."""
    folder = tmp_path_factory.mktemp("tables")
    memory = in_memory(hf, *photos)
    disk = saved(hf, memory, folder / "saved")
    disk.to_parquet(str(folder / "photos.parquet"))
    parquet = hf.Dataset.from_parquet(str(folder / "photos.parquet"),
                                      cache_dir=str(folder / "cache"))
    return {"in_memory": memory, "saved": disk, "parquet": parquet}


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    folder = tmp_path_factory.mktemp("clips")
    paths, labels = make_clips(folder / "files")
    memory = in_memory(hf, paths, labels, "audio", hf.Audio(decode=False))
    return paths, labels, {"in_memory": memory, "saved": saved(hf, memory, folder / "saved")}


def expected_bytes(cell) -> bytes:
    """What `datasets` holds for a cell: its bytes, or its file's."""
    return cell["bytes"] if cell["bytes"] is not None else file_bytes(cell["path"])


@pytest.mark.parametrize("kind", KINDS)
def test_items_are_the_files_bytes_and_datasets_own_labels_in_order(kind, tables, photos):
    dataset = tables[kind]
    wrapper = ArrowColumns(dataset)
    paths, labels = photos
    assert len(wrapper) == len(paths) and wrapper.fields == {"image", "label"}
    assert wrapper.classes == CLASSES
    for i in range(len(wrapper)):
        data, target = wrapper[i]
        row = dataset[i]
        assert type(data) is bytes and data == file_bytes(paths[i])
        assert data == expected_bytes(row["image"])
        assert type(target) is int and target == row["label"] == labels[i]


@pytest.mark.parametrize("kind", KINDS)
def test_decoded_items_equal_datasets_own_decode(kind, tables):
    dataset = tables[kind]
    wrapper = ArrowColumns(dataset)
    decoder = hf.Image()   # datasets' own decode of a cell: a PIL image
    for i in range(len(wrapper)):
        data, _ = wrapper[i]
        theirs = np.asarray(decoder.decode_example(dataset[i]["image"]).convert("RGB"))
        ours = decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8),
                            mode=ImageReadMode.RGB)
        assert np.array_equal(ours.permute(1, 2, 0).numpy(), theirs), f"row {i}"


@pytest.mark.parametrize("kind", KINDS)
def test_shuffle_and_select_give_datasets_order(kind, tables, photos):
    paths = photos[0]
    shuffled = tables[kind].shuffle(seed=5)
    for dataset in (shuffled, tables[kind].select([7, 3, 3, 39, 0]),
                    shuffled.select(range(10, 30)), tables[kind].select(range(4, 9))):
        wrapper = ArrowColumns(dataset)
        order = dataset["n"]
        assert len(wrapper) == len(order)
        assert [wrapper[i][0] for i in range(len(wrapper))] == [file_bytes(paths[n])
                                                              for n in order]
        assert [wrapper[i][1] for i in range(len(wrapper))] == dataset["label"]
    assert shuffled["n"] != sorted(shuffled["n"])   # the shuffle did reorder


def test_clips_are_their_files_and_decode_as_libsndfile_does(clips):
    paths, labels, kinds = clips
    for kind, dataset in kinds.items():
        wrapper = ArrowColumns(dataset)
        assert wrapper.fields == {"audio", "label"} and wrapper.column == "audio"
        for i, path in enumerate(paths):
            data, target = wrapper[i]
            assert data == file_bytes(path) == expected_bytes(dataset[i]["audio"]), kind
            assert target == labels[i] == dataset[i]["label"]
            ours, rate = soundfile.read(io.BytesIO(data), dtype="float32")
            theirs, their_rate = soundfile.read(path, dtype="float32")
            assert rate == their_rate and np.array_equal(ours, theirs)


def test_plain_int_and_string_labels(photos):
    paths, labels = photos
    names = [CLASSES[label] for label in labels]
    dataset = hf.Dataset.from_dict({"image": paths, "label": labels, "name": names})
    dataset = dataset.cast_column("image", hf.Image(decode=False))
    ints, strings = ArrowColumns(dataset), ArrowColumns(dataset, label="name")
    assert ints.classes is None
    assert [ints[i][1] for i in range(len(ints))] == labels
    assert [strings[i][1] for i in range(len(strings))] == names


def test_the_source_names_and_keys_each_row(tables):
    disk = ArrowColumns(tables["saved"]).source
    assert source_of(ArrowColumns(tables["saved"])) is not None
    assert isinstance(disk, ArrowSource) and disk.encoded_items and disk.transform is None
    files = [entry["filename"] for entry in tables["saved"].cache_files]
    assert len(files) == 3
    names = [disk.metadata(i)[1] for i in range(len(disk))]
    rows_per_file = Counter(name.rsplit("[", 1)[0] for name in names)
    assert set(rows_per_file) == set(files) and sum(rows_per_file.values()) == len(disk)
    first_of_second = rows_per_file[files[0]]
    assert names[first_of_second] == f"{files[1]}[row 0]"
    keys = [disk.key(i) for i in range(len(disk))]
    assert len(set(keys)) == len(keys) and keys[0] == files[0].encode() + b"#0"
    sample = disk.read(5)
    assert isinstance(sample, EncodedSample) and sample.name == names[5]
    assert disk.metadata(5) == (sample.target, sample.name)
    memory = ArrowColumns(tables["in_memory"]).source   # cells holding paths: as files
    assert memory.metadata(2)[1] == tables["in_memory"][2]["image"]["path"]
    assert memory.key(2) == tables["in_memory"][2]["image"]["path"].encode()


def test_keys_are_the_same_in_another_process_and_another_load(tables, tmp_path):
    """A fresh interpreter: `import pimloader` imports neither datasets nor pyarrow; the
    wrapper unpickled there gives the same keys, and so does the dataset loaded again."""
    dataset = tables["saved"].shuffle(seed=1)
    keys = [ArrowColumns(dataset).source.key(i) for i in range(len(dataset))]
    script = ("import pickle, sys, pimloader\n"
              "from pimloader.datasets import ArrowColumns\n"
              "assert 'datasets' not in sys.modules and 'pyarrow' not in sys.modules\n"
              "wrapper = pickle.load(open(sys.argv[1], 'rb'))\n"
              "print(repr([wrapper.source.key(i) for i in range(len(wrapper))]))\n")
    (tmp_path / "wrapper.pkl").write_bytes(pickle.dumps(ArrowColumns(dataset)))
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "wrapper.pkl")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert eval(out.stdout) == keys
    reloaded = hf.load_from_disk(os.path.dirname(tables["saved"].cache_files[0]["filename"]))
    again = ArrowColumns(reloaded.shuffle(seed=1)).source
    assert [again.key(i) for i in range(len(again))] == keys


def test_a_loaded_table_pickles_by_file_reference(tables, photos):
    total = sum(len(file_bytes(path)) for path in photos[0])
    for dataset in (tables["saved"], tables["parquet"], tables["saved"].shuffle(seed=2)):
        wrapper = ArrowColumns(dataset)
        wrapper[0]   # the reader opened in this process is not pickled
        pickled = pickle.dumps(wrapper)
        assert len(pickled) < min(4096, total // 10), len(pickled)
        copy = pickle.loads(pickled)
        assert [copy[i] for i in range(len(copy))] == [wrapper[i] for i in range(len(wrapper))]


# -- errors ---------------------------------------------------------------------------------

def test_a_missing_column_is_named(tables):
    with pytest.raises(KeyError, match=r"no column 'photo'.*image \(Image\)"):
        ArrowColumns(tables["saved"], column="photo")
    with pytest.raises(KeyError, match=r"no label column 'class'"):
        ArrowColumns(tables["saved"], label="class")


def test_a_column_that_is_not_encoded_is_named(tables, photos):
    with pytest.raises(TypeError, match=r"column 'n' is Value\('int64'\).*not an Image"):
        ArrowColumns(tables["saved"], column="n")
    decoded = tables["saved"].cast_column("image", hf.Image())
    with pytest.raises(ValueError, match=r"column 'image' is Image\(decode=True\).*"
                                         r"cast_column\('image', datasets.Image\(decode=False"):
        ArrowColumns(decoded)
    plain = hf.Dataset.from_dict({"image": photos[0], "label": photos[1]})   # strings
    with pytest.raises(ValueError, match=r"0 Image/Audio columns \[\] among image \(Value\)"):
        ArrowColumns(plain)
    two = tables["in_memory"].add_column("again", photos[0]).cast_column(
        "again", hf.Image(decode=False))
    with pytest.raises(ValueError, match=r"2 Image/Audio columns \['image', 'again'\]"):
        ArrowColumns(two)
    assert ArrowColumns(two, column="again")[3][0] == file_bytes(photos[0][3])


def test_other_datasets_are_refused_with_the_reason(tables):
    with pytest.raises(TypeError, match=r"one split of a DatasetDict.*\['train'\]"):
        ArrowColumns(hf.DatasetDict({"train": tables["saved"]}))
    with pytest.raises(TypeError, match=r"map-style datasets.Dataset, got list"):
        ArrowColumns([1, 2])
    with pytest.raises(ValueError, match=r"with_transform.*after T.Decode"):
        ArrowColumns(tables["saved"].with_transform(lambda batch: batch))
    with pytest.raises(ValueError, match=r"the label column 'image' is the encoded column"):
        ArrowColumns(tables["saved"], label="image")


def test_a_bad_cell_is_named(photos, tmp_path):
    gone = str(tmp_path / "gone.jpg")
    dataset = hf.Dataset.from_dict({"image": [photos[0][0], None, gone], "label": [0, 1, 2]})
    wrapper = ArrowColumns(dataset.cast_column("image", hf.Image(decode=False)))
    assert wrapper[0][0] == file_bytes(photos[0][0])
    with pytest.raises(ValueError, match=r"in-memory datasets.Dataset \w+\[row 1\]: the "
                                         r"'image' cell has neither bytes nor a path"):
        wrapper[1]
    with pytest.raises(FileNotFoundError, match="gone.jpg"):
        wrapper[2]
    with pytest.raises(IndexError):
        wrapper[3]


def test_cells_read_as_views_across_chunks_of_bytes_and_paths(photos):
    """Rows spread over several Arrow chunks, some holding bytes and some only a path (a
    null bytes cell), a sliced (shuffled, selected) view, float and int labels: every read
    is the cell's bytes (or its file's) and the label is the very value `datasets` gives,
    of the same Python type."""
    paths, labels = photos
    image = hf.Image(decode=False)
    with_bytes = hf.Dataset.from_dict(
        {"image": [{"bytes": file_bytes(path), "path": None} for path in paths],
         "label": labels, "weight": [label / 4 for label in labels]}).cast_column("image", image)
    with_paths = hf.Dataset.from_dict(
        {"image": paths, "label": labels, "weight": [label / 4 for label in labels]}
    ).cast_column("image", image)
    joined = hf.concatenate_datasets([with_bytes, with_paths, with_bytes])
    shuffled = joined.shuffle(seed=3).select(range(len(joined) - 5))
    sliced = joined.select(range(3, len(joined) - 2))   # contiguous: chunks sliced, no indices
    assert len(joined.data.column("image").chunks) > 1
    for table, label in [(shuffled, "label"), (shuffled, "weight"), (sliced, "label")]:
        source = source_of(ArrowColumns(table, "image", label))
        for i in range(len(table)):
            sample = source.read(i)
            assert bytes(sample.data) == expected_bytes(table[i]["image"])
            assert sample.target == table[i][label]
            assert type(sample.target) is type(table[i][label])

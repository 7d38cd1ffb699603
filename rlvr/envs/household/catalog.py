"""What a household holds: rooms, their receptacles and objects, and which objects each
task type can use (a small stand-in for ALFWorld's ALFRED scene and object lists)."""

from __future__ import annotations

TASK_TYPES = (
    "pick_and_place_simple",
    "pick_two_obj_and_place",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
)
"""ALFWorld's six task types, by its own names."""

OPENABLE = frozenset({"cabinet", "drawer", "fridge", "microwave", "safe"})
INSIDE = frozenset(
    {"cabinet", "drawer", "fridge", "microwave", "sinkbasin", "bathtubbasin", "garbagecan"}
    | {"safe", "laundryhamper"}
)
"""Receptacles a goal sentence puts things *in*; the others take things *on*."""

APPLIANCE = {"heat": "microwave", "cool": "fridge", "clean": "sinkbasin"}

ROOMS: dict[str, dict] = {
    "kitchen": {
        "receptacles": {
            "cabinet": (2, 5),
            "countertop": (1, 3),
            "drawer": (1, 3),
            "fridge": (1, 1),
            "microwave": (1, 1),
            "sinkbasin": (1, 1),
            "stoveburner": (2, 4),
            "garbagecan": (1, 1),
            "toaster": (1, 1),
            "coffeemachine": (1, 1),
            "diningtable": (1, 1),
            "shelf": (0, 2),
        },
        "objects": (
            "apple",
            "bread",
            "egg",
            "potato",
            "tomato",
            "lettuce",
            "mug",
            "cup",
            "plate",
            "bowl",
            "pan",
            "pot",
            "knife",
            "fork",
            "spoon",
            "spatula",
            "ladle",
            "butterknife",
            "dishsponge",
            "saltshaker",
            "peppershaker",
            "winebottle",
        ),
        "lamp": None,
    },
    "livingroom": {
        "receptacles": {
            "sofa": (1, 1),
            "armchair": (1, 2),
            "coffeetable": (1, 1),
            "sidetable": (1, 2),
            "tvstand": (1, 1),
            "drawer": (1, 3),
            "cabinet": (0, 2),
            "shelf": (1, 3),
            "garbagecan": (1, 1),
        },
        "objects": (
            "remotecontrol",
            "keychain",
            "creditcard",
            "box",
            "laptop",
            "newspaper",
            "pillow",
            "statue",
            "vase",
            "watch",
            "book",
            "cellphone",
        ),
        "lamp": "floorlamp",
    },
    "bedroom": {
        "receptacles": {
            "bed": (1, 1),
            "desk": (1, 1),
            "dresser": (1, 1),
            "drawer": (2, 4),
            "shelf": (1, 3),
            "sidetable": (0, 1),
            "garbagecan": (1, 1),
            "safe": (0, 1),
            "laundryhamper": (0, 1),
        },
        "objects": (
            "alarmclock",
            "book",
            "cd",
            "cellphone",
            "creditcard",
            "keychain",
            "pen",
            "pencil",
            "pillow",
            "laptop",
            "mug",
            "bowl",
        ),
        "lamp": "desklamp",
    },
    "bathroom": {
        "receptacles": {
            "toilet": (1, 1),
            "sinkbasin": (1, 1),
            "bathtubbasin": (1, 1),
            "cabinet": (1, 4),
            "countertop": (1, 1),
            "garbagecan": (1, 1),
            "towelholder": (1, 1),
            "handtowelholder": (1, 1),
            "shelf": (0, 2),
        },
        "objects": (
            "soapbar",
            "soapbottle",
            "spraybottle",
            "toiletpaper",
            "candle",
            "towel",
            "handtowel",
            "cloth",
            "dishsponge",
            "tissuebox",
        ),
        "lamp": None,
    },
}
"""Per room: receptacle kinds with (fewest, most) instances, object kinds, and its lamp
(an object that stays where it is and is switched with `use`)."""

NOT_PLACES = frozenset({"toaster", "coffeemachine", "stoveburner"})
"""Receptacles no object starts in and no goal names (they still take what is put there)."""

HEATABLE = frozenset({"apple", "bread", "egg", "potato", "tomato", "mug", "cup", "plate"})
COOLABLE = HEATABLE | {"lettuce", "winebottle", "pan", "pot", "bowl"}
CLEANABLE = frozenset(
    {"apple", "lettuce", "tomato", "potato", "egg", "mug", "cup", "plate", "bowl", "pan"}
    | {"pot", "knife", "fork", "spoon", "spatula", "ladle", "butterknife", "cloth", "soapbar"}
    | {"dishsponge"}
)
LOOKABLE = frozenset(
    {"alarmclock", "book", "bowl", "cd", "cellphone", "creditcard", "keychain", "pen"}
    | {"pencil", "pillow", "statue", "vase", "watch", "remotecontrol", "box", "laptop"}
    | {"newspaper", "mug"}
)
USABLE = {
    "pick_and_place_simple": None,
    "pick_two_obj_and_place": None,
    "look_at_obj_in_light": LOOKABLE,
    "pick_clean_then_place_in_recep": CLEANABLE,
    "pick_heat_then_place_in_recep": HEATABLE,
    "pick_cool_then_place_in_recep": COOLABLE,
}
"""The object kinds a task type may ask for (None: any of the room's)."""

ROOMS_FOR = {
    "pick_and_place_simple": ("kitchen", "livingroom", "bedroom", "bathroom"),
    "pick_two_obj_and_place": ("kitchen", "livingroom", "bedroom", "bathroom"),
    "look_at_obj_in_light": ("livingroom", "bedroom"),
    "pick_clean_then_place_in_recep": ("kitchen", "bathroom"),
    "pick_heat_then_place_in_recep": ("kitchen",),
    "pick_cool_then_place_in_recep": ("kitchen",),
}


def kind_of(name: str) -> str:
    """``"apple 1"`` → ``"apple"``."""
    return name.rsplit(" ", 1)[0]

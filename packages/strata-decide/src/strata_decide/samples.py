"""A built-in set of 5 states x 3 questions (one of each kind), for parity and the benchmark.

The states are support messages of roughly 200 tokens each, so the shared state prefix is
the bulk of every prompt, as in real decision workloads.
"""

from __future__ import annotations

from typing import Any

STATES: list[str] = [
    (
        "Subject: Charged twice for order #48213\n\n"
        "Hello, I placed an order for a pair of running shoes on Monday evening and paid with my "
        "credit card. This morning I checked my banking app and saw two identical charges of "
        "$89.99 from your store, both dated Monday. I only received one confirmation email and "
        "one tracking number, so I am fairly sure only one order exists. I have already contacted "
        "my bank, and they told me that the second charge is not a pending authorisation but a "
        "completed payment, which means I have to ask the merchant for the refund. Could you "
        "please look into this and refund the duplicate charge as soon as possible? Rent is due "
        "at the end of the week and this money matters to me. I have attached a screenshot of "
        "the statement. Thanks in advance, Dana."
    ),
    (
        "Subject: App crashes when uploading photos\n\n"
        "Hi team, since the update last Thursday the mobile app closes itself every time I try "
        "to upload more than three photos to a listing. It happens on my phone (Android 14) and "
        "on my partner's phone too. Single photos work fine. I tried clearing the cache, "
        "reinstalling the app and switching between Wi-Fi and mobile data, and nothing changed. "
        "The web version still works, so I can keep selling for now, but it is much slower for "
        "me because all my pictures are on the phone. I run a small second-hand furniture shop "
        "and add about twenty listings a week, so this costs me a few hours. Is there a fix "
        "planned, or an older version I could install in the meantime? I'm happy to send logs "
        "if you tell me how to collect them. Best regards, Malik."
    ),
    (
        "Subject: Thank you!\n\n"
        "I just wanted to say thank you to the person who helped me on the phone yesterday. I "
        "had been struggling for weeks to move my late father's account over to my name, and "
        "every time I called I was sent to a different department. Yesterday your colleague, I "
        "believe her name was Priya, stayed on the line for almost an hour, explained every "
        "document I needed, and even called me back when the system went down in the middle of "
        "the process. Everything is done now and the account shows my name. It has been a hard "
        "year for my family and this made one part of it much easier. Please pass my thanks to "
        "her and to her manager. I do not need anything else, I only wanted someone to know how "
        "much it meant. Warm wishes, Helen."
    ),
    (
        "Subject: Cancel my subscription NOW\n\n"
        "This is the third time I am writing. I asked you to cancel my premium subscription on "
        "the 2nd of this month, and your chatbot told me it was done. Today I was charged again "
        "for another full year, $240, without any reminder email. I never agreed to an annual "
        "renewal, and I cannot find any button in my account settings to turn it off. If this is "
        "not reversed within 48 hours I will file a complaint with my credit card company and "
        "with the consumer protection office, and I will leave a review describing exactly how "
        "you treat customers who want to leave. I want written confirmation that the account is "
        "cancelled and that the full amount has been refunded. Do not send me another survey. "
        "Regards, T. Okafor."
    ),
    (
        "Subject: Question about delivery to a new address\n\n"
        "Good afternoon. I am moving house next Tuesday and I have two orders on the way: a desk "
        "lamp that shipped yesterday and a bookshelf that is still being prepared. The lamp is "
        "going to my old address, which is fine because the new tenants are friends of mine and "
        "will keep it for me. For the bookshelf, though, I would like to change the delivery "
        "address to the new flat, which is on the fourth floor of a building without a lift. "
        "Is it possible to change the address at this stage, and does the delivery service carry "
        "heavy items upstairs, or should I arrange help? I am not in a hurry, so if a later "
        "delivery date makes this easier, that is completely fine with me. Kind regards, Jonas."
    ),
]

QUESTIONS: dict[str, dict[str, Any]] = {
    "topic": {
        "type": "choice",
        "instructions": "What is the message mainly about?",
        "criteria": {
            "billing": "Payments, charges, refunds or invoices",
            "technical": "Bugs, crashes or features not working",
            "account": "Account access, ownership or subscriptions",
            "shipping": "Deliveries, addresses and parcels",
            "feedback": "Praise or general comments without a request",
        },
    },
    "urgency": {
        "type": "score",
        "instructions": "How urgently does this message need a reply?",
        "criteria": ["Can wait", "Within a few days", "Today", "Immediately"],
    },
    "angry": {
        "type": "noul",
        "instructions": "Is the writer angry?",
        "criteria": {
            "true": "The writer is upset or hostile",
            "false": "The writer is calm or friendly",
        },
    },
}
